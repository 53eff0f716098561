import torch, torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity
print("preferred blas:", torch.backends.cuda.preferred_blas_library(), torch.__version__)
def t(fn, r=30):
    for i in range(3): fn(i)
    s=torch.cuda.Event(enable_timing=True); e=torch.cuda.Event(enable_timing=True); ts=[]
    for i in range(r):
        s.record(); fn(i); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[len(ts)//2]
for lib in ("cublaslt", "cublas"):
    torch.backends.cuda.preferred_blas_library(lib)
    for m in (2048, 4096):
        for name,n,k in (("qkv",6144,4096),("o_proj",4096,4096),("gate_up",24576,4096),("down",4096,12288)):
            x=torch.randn(m,k,device="cuda",dtype=torch.bfloat16)
            copies=max(1, int(4*50e6/(n*k*2))+1)
            ws=[torch.randn(n,k,device="cuda",dtype=torch.bfloat16)*0.05 for _ in range(copies)]
            ms=t(lambda i: F.linear(x,ws[i%copies]))
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                F.linear(x,ws[0]); torch.cuda.synchronize()
            names=[e.name for e in prof.events() if e.device_type==torch.autograd.DeviceType.CUDA]
            print(f"{lib} {m} {name} {ms*1e3:.1f} us {2*m*n*k/ms/1e9:.0f} TFLOP/s  {names[:2]}")
            del ws
