"""How much of a one-token pass on a GPU is launching kernels: one decoding step at
Qwen2.5-Coder's 1.5B, 7B and 0.5B shapes in plain torch bf16 (random weights, a 1,536-token KV
cache), timed eager and replayed as a CUDA graph (mean of 50 after 5 warm-ups). The eager step
launches what the torch backend's pass launches; the graph's time is what capturing passes would
bring it to. Needs a CUDA GPU; writes its figures to the JSON file named.

  python3 scripts/gpu_graph_floor.py OUT.json
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

dev = "cuda"
torch.manual_seed(0)
SHAPES = {"1.5b": (1536, 8960, 28, 12, 2, 151936), "7b": (3584, 18944, 28, 28, 4, 152064),
          "0.5b": (896, 4864, 24, 14, 2, 151936)}
CTX = 1536
out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}


def build(hidden, inter, layers, heads, kv, vocab):
    hd = hidden // heads
    r = lambda *s: (torch.randn(*s, device=dev, dtype=torch.bfloat16) * 0.02)
    L = [dict(n1=torch.ones(hidden, device=dev, dtype=torch.bfloat16), qkv=r((heads + 2 * kv) * hd, hidden),
              bqkv=r((heads + 2 * kv) * hd), o=r(hidden, heads * hd), n2=torch.ones(hidden, device=dev, dtype=torch.bfloat16),
              gu=r(2 * inter, hidden), d=r(hidden, inter)) for _ in range(layers)]
    head = r(vocab, hidden)
    kc = r(layers, kv, CTX + 1, hd)
    vc = r(layers, kv, CTX + 1, hd)
    cos = torch.ones(1, 1, hd, device=dev, dtype=torch.bfloat16)
    sin = torch.zeros(1, 1, hd, device=dev, dtype=torch.bfloat16)
    return hd, L, head, kc, vc, cos, sin


def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def rot(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def step(x, hd, heads, kv, L, head, kc, vc, cos, sin):
    for i, l in enumerate(L):
        h = rms(x, l["n1"])
        q, k, v = F.linear(h, l["qkv"], l["bqkv"]).split([heads * hd, kv * hd, kv * hd], -1)
        q, k, v = q.view(1, heads, hd).transpose(0, 1), k.view(1, kv, hd).transpose(0, 1), v.view(1, kv, hd).transpose(0, 1)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        kc[i, :, CTX:CTX + 1] = k
        vc[i, :, CTX:CTX + 1] = v
        K = kc[i].repeat_interleave(heads // kv, 0)
        V = vc[i].repeat_interleave(heads // kv, 0)
        a = F.scaled_dot_product_attention(q.unsqueeze(0), K.unsqueeze(0), V.unsqueeze(0))[0]
        x = x + F.linear(a.transpose(0, 1).reshape(1, heads * hd), l["o"])
        h = rms(x, l["n2"])
        g, u = F.linear(h, l["gu"]).chunk(2, -1)
        x = x + F.linear(F.silu(g) * u, l["d"])
    return F.linear(rms(x, torch.ones_like(x[0])), head).argmax(-1)


def timed(fn, n=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1000


for name, (hidden, inter, layers, heads, kv, vocab) in SHAPES.items():
    hd, L, head, kc, vc, cos, sin = build(hidden, inter, layers, heads, kv, vocab)
    x = torch.randn(1, hidden, device=dev, dtype=torch.bfloat16)
    run = lambda: step(x, hd, heads, kv, L, head, kc, vc, cos, sin)
    eager = timed(run)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ids = run()
    graph = timed(g.replay)
    nbytes = sum(t.numel() * t.element_size() for l in L for t in l.values()) + head.numel() * 2
    out[name] = {"eager_ms": round(eager, 3), "graph_ms": round(graph, 3), "weights_gb": round(nbytes / 1e9, 3),
                 "graph_read_tb_s": round(nbytes / (graph / 1000) / 1e12, 2)}
    print(name, out[name], flush=True)
    del L, head, kc, vc, g
    torch.cuda.empty_cache()
json.dump(out, open(sys.argv[1], "w"), indent=1)
