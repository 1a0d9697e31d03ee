"""A small byte-level softmax transformer LM, trained for a few minutes on the bundled English sample,
whose per-layer queries, keys and values serve as real attention inputs for the approximation benchmark.

Two pre-norm layers of 128 with two heads of 64 (the head dimension of the speed benchmark), causal
softmax attention and
sinusoidal positions; trained with Adam on random windows of data/sample/doc_en/train.txt. The trained
weights are cached (a file per setting), so a second run reuses them.
"""

import math
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "sample", "doc_en")


def read_bytes(split):
    with open(os.path.join(SAMPLE, f"{split}.txt"), "rb") as f:
        return torch.tensor(list(f.read()), dtype=torch.long)


def sinusoids(N, dim):
    position = torch.arange(N, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(N, dim)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * frequency), torch.cos(position * frequency)
    return table


class Layer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(dim, dim) for _ in range(4))
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def qkv(self, x):
        """B x N x dim -> per-head q, k, v, each B x H x N x d."""
        B, N, D = x.shape
        h = self.norm1(x)
        return [p(h).view(B, N, self.heads, D // self.heads).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj)]

    def forward(self, x):
        q, k, v = self.qkv(x)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(2)
        x = x + self.out_proj(y)
        return x + self.ffn(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, layers=2, dim=128, heads=2):
        super().__init__()
        self.embed = nn.Embedding(256, dim)
        nn.init.normal_(self.embed.weight, std=dim**-0.5)
        self.layers = nn.ModuleList(Layer(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens, capture=None):
        """tokens: B x N bytes -> B x N x 256 logits; capture: a list that receives each layer's (q, k, v)."""
        x = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + sinusoids(tokens.size(1), self.embed.embedding_dim)
        for layer in self.layers:
            if capture is not None:
                capture.append(layer.qkv(x))
            x = layer(x)
        return self.norm(x) @ self.embed.weight.T


def train(steps, seq_len=1024, batch=2, layers=2, dim=128, heads=2, seed=0, log=print):
    torch.manual_seed(seed)
    data = read_bytes("train")
    model = TinyLM(layers, dim, heads)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50) * max(0.1, 1 - s / max(steps, 1)))
    start = time.time()
    for step in range(steps):
        offsets = torch.randint(0, len(data) - seq_len - 1, (batch,))
        window = torch.stack([data[o : o + seq_len + 1] for o in offsets.tolist()])
        loss = F.cross_entropy(model(window[:, :-1]).flatten(0, 1), window[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"tiny LM step {step}: {loss.item() / math.log(2):.3f} bits/byte ({time.time() - start:.0f} s)")
    return model.eval()


def trained(cache_dir, steps, **options):
    """The trained model of these settings, from cache_dir if it was trained before."""
    name = "tiny_lm_" + "_".join(f"{k}{v}" for k, v in sorted(dict(steps=steps, **options).items())) + ".pt"
    path = os.path.join(cache_dir, name)
    if os.path.exists(path):
        model = TinyLM(**{k: v for k, v in options.items() if k in ("layers", "dim", "heads")})
        model.load_state_dict(torch.load(path, weights_only=True))
        return model.eval()
    model = train(steps, **options)
    os.makedirs(cache_dir, exist_ok=True)
    torch.save(model.state_dict(), path)
    return model


def validation_qkv(model, N, sequences=1, dtype=torch.float64):
    """Per-layer (q, k, v) of the model on the first sequences x N bytes of the validation text."""
    data = read_bytes("valid")[: sequences * N].view(sequences, N)
    captured = []
    with torch.no_grad():
        model(data, capture=captured)
    return [tuple(t.to(dtype) for t in qkv) for qkv in captured]
