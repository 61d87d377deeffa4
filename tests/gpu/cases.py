# Worker programs for tests/gpu/run.sh: each fails the way GPU training jobs fail.
import os, sys
case = sys.argv[1]
if case == "versions":
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())),
          "device", torch.cuda.get_device_name(0), flush=True)
elif case == "gpu_oom":
    import torch
    x = torch.empty(int(200 * 2**30), dtype=torch.uint8, device="cuda")
elif case == "gpu_oom_after_use":
    import torch
    keep = torch.empty(int(100 * 2**30), dtype=torch.uint8, device="cuda")
    x = torch.empty(int(60 * 2**30), dtype=torch.uint8, device="cuda")
elif case == "device_assert":
    import torch
    a = torch.zeros(3, device="cuda")
    i = torch.tensor([5], device="cuda")
    print(a[i])
    torch.cuda.synchronize()
elif case == "illegal_access":
    import torch, triton, triton.language as tl
    @triton.jit
    def bad(p):
        tl.store(p + (1 << 40), 1.0)
    t = torch.zeros(1, device="cuda")
    bad[(1,)](t)
    torch.cuda.synchronize()
elif case == "nccl_duplicate":
    import torch, torch.distributed as dist
    dist.init_process_group("nccl")
    t = torch.ones(1, device="cuda:0")
    dist.all_reduce(t)
    torch.cuda.synchronize()
elif case == "nccl_timeout":
    import datetime, time, torch, torch.distributed as dist
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=8))
    if dist.get_rank() == 1:
        time.sleep(60)
    t = torch.ones(1, device="cuda:0")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    time.sleep(60)
elif case == "zygote_cuda_first":
    import torch
    torch.zeros(1, device="cuda")
    import xmprun as xmp
    def fn(index):
        print("worker", index)
    xmp.spawn(fn)
elif case == "zygote_raises":
    raise RuntimeError("zygote failed while loading the model: checkpoint /ckpt/model.pt not found")
elif case == "zygote_no_spawn":
    print("zygote done without spawning")
elif case == "hang_cuda":
    import torch
    print("hanging in a CUDA kernel", flush=True)
    torch.cuda._sleep(int(1e12))
    torch.cuda.synchronize()
