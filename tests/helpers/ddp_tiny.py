# A tiny real DDP job over gloo for the multi-node tests: a 4->1 linear model trained for 20
# steps, then every rank checks that all ranks hold the same weights. FAIL_RANK=r makes rank r
# exit 7 at step 5, as a worker that crashes mid-training. HANG_RANK=r gives every step 1.5 s of
# compute and makes rank r sleep at the start of step 1, as a worker that stops stepping: the
# others compute their step, then block in the gradients' all_reduce. Run with Debian's
# /usr/bin/python3.
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
fail = os.environ.get("FAIL_RANK")
hang = os.environ.get("HANG_RANK")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(rank)
for step in range(20):
    if hang is not None:
        if int(hang) == rank and step == 1:
            print(f"rank {rank} hangs on purpose at step {step}", flush=True)
            time.sleep(3600)
        start = time.monotonic()
        while time.monotonic() - start < 1.5:
            pass
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if fail is not None and int(fail) == rank and step == 5:
        print(f"rank {rank} fails on purpose at step {step}", file=sys.stderr, flush=True)
        sys.exit(7)
w = torch.cat([p.detach().flatten() for p in model.parameters()])
everyone = [torch.zeros_like(w) for _ in range(dist.get_world_size())]
dist.all_gather(everyone, w)
assert all(torch.equal(everyone[0], x) for x in everyone), "ranks disagree on the weights"
print(f"ok rank={rank} world={dist.get_world_size()} run_id={os.environ['TORCHELASTIC_RUN_ID']}",
      flush=True)
dist.destroy_process_group()
