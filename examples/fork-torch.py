"""start: fork with PyTorch: a model of about 1 GiB built once, in the zygote, and 4 CPU workers
running forward passes on it. Written as a torch_xla script; the only change is the import
(torch_xla: `import torch_xla.distributed.xla_multiprocessing as xmp`).

    xmprun examples/fork-torch.yaml

Host memory holds one copy of the weights: each worker's cgroup is charged only for what it
allocates itself (activations, the dataset it loads), so `resources.worker.memory` is a few
hundred MiB although every worker reads the whole 1 GiB model. The report's zygote object
carries the weights' cost (`zygote.memory.peak_bytes`).
"""

import os
import sys
import tempfile
import time

import torch

import xmprun as xmp

FLAGS = {
    "model_mib": int(sys.argv[1]) if len(sys.argv) > 1 else 1024,
    "batch": 8,
    "steps": 5,
}
WIDTH = 4096  # 4096 x 4096 float32 = 64 MiB per layer


def build_model(mib):
    layers = []
    for _ in range(max(1, mib // 64)):
        layers += [torch.nn.Linear(WIDTH, WIDTH, bias=False), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).eval()


# Built once, before any fork, on the CPU (never on a GPU or an XLA device: a forked worker
# could not use a runtime the zygote initialised).
started = time.monotonic()
MODEL = xmp.MpModelWrapper(build_model(FLAGS["model_mib"]))
SERIAL = xmp.MpSerialExecutor()
DATASET = os.path.join(tempfile.mkdtemp(prefix="fork-torch-"), "data.pt")
torch.save(torch.randn(64, WIDTH), DATASET)
print(
    "zygote: built a %d MiB model in %.1fs"
    % (sum(p.numel() * 4 for p in MODEL._model.parameters()) >> 20, time.monotonic() - started),
    flush=True,
)


def _mp_fn(index, flags):
    # One worker at a time reads the dataset (job-wide lock, released if its holder dies).
    data = SERIAL.run(lambda: torch.load(DATASET))
    model = MODEL.to("cpu")
    with torch.no_grad():
        for step in range(flags["steps"]):
            batch = data[step * flags["batch"] : (step + 1) * flags["batch"]]
            out = model(batch)
    print("rank %d: %d forward passes, output %s" % (index, flags["steps"], tuple(out.shape)))
    return float(out.sum())


if __name__ == "__main__":
    results = xmp.spawn(_mp_fn, args=(FLAGS,), start_method="fork", gather=True)
    os.unlink(DATASET)
    os.rmdir(os.path.dirname(DATASET))
    print("zygote: results by rank: %s" % ["%.3g" % r for r in results])
