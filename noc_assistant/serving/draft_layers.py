"""The drafter's configuration and building blocks: RMS norm, rotary embedding, decoder layer.

:class:`DrafterConfig` sizes a :class:`~noc_assistant.serving.draft_heads.BlockDrafterModel`;
:class:`DraftLayer` is one of its layers (a Qwen3-style decoder layer whose keys and values are
the context rows followed by the block rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from noc_assistant.serving.loading import TargetModel

__all__ = ["DraftLayer", "DrafterConfig", "RMSNorm"]


@dataclass
class DrafterConfig:
    """Shape and switches of a block drafter (``dspine=False`` is the DFlash-style baseline)."""

    hidden_size: int
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    n_taps: int = 2
    block_size: int = 8
    rope_theta: float = 10000.0
    eps: float = 1e-6
    causal_block: bool = True
    dspine: bool = False
    inject_layers: bool = True
    refine: bool = True
    transfer_rank: int = 32
    message_size: int = 32
    top_k: int = 16
    draft_vocab: list[int] = field(default_factory=list)

    @classmethod
    def for_target(cls, target: TargetModel, **kw: Any) -> DrafterConfig:
        """A config sized from the target (hidden size, taps, heads of width 64 or d/4)."""
        d = target.hidden_size
        head_dim = 64 if d % 64 == 0 and d >= 256 else d // 4
        heads = d // head_dim
        kv = max(1, heads // 3) if heads % 3 == 0 else max(1, heads // 2)
        base: dict[str, Any] = {
            "hidden_size": d,
            "num_heads": heads,
            "num_kv_heads": kv,
            "head_dim": head_dim,
            "intermediate_size": 2 * d if d < 256 else int(1.75 * d),
            "n_taps": len(target.tap_layers),
            "transfer_rank": min(128, d // 2),
            "message_size": min(128, d // 2),
        }
        base.update(kw)
        return cls(**base)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.weight


def _rope(x: Tensor, pos: Tensor, theta: float) -> Tensor:
    """Rotary embedding of x [..., T, hd] at positions pos [..., T] (broadcast over heads)."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd))
    ang = pos.float().unsqueeze(-1) * inv
    ang = torch.cat([ang, ang], dim=-1)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    rot = torch.cat([-x2, x1], dim=-1)
    return x * cos + rot * sin


class DraftLayer(nn.Module):
    """A Qwen3-style decoder layer whose keys/values are [context rows; block rows]."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        d, h, kv, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.cfg = cfg
        self.q_proj = nn.Linear(d, h * hd, bias=False)
        self.k_proj = nn.Linear(d, kv * hd, bias=False)
        self.v_proj = nn.Linear(d, kv * hd, bias=False)
        self.o_proj = nn.Linear(h * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, cfg.eps)
        self.k_norm = RMSNorm(hd, cfg.eps)
        self.input_norm = RMSNorm(d, cfg.eps)
        self.post_norm = RMSNorm(d, cfg.eps)
        self.gate = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, d, bias=False)

    def kv(self, x: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        """K (normed, rotated) and V of rows x [G, S, d] at positions pos [S] -> [G, kv, S, hd]."""
        g, s, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(g, s, self.cfg.num_kv_heads, -1)).transpose(1, 2)
        v = self.v_proj(x).view(g, s, self.cfg.num_kv_heads, -1).transpose(1, 2)
        return _rope(k, pos, self.cfg.rope_theta), v

    def forward(self, h: Tensor, ctx_k: Tensor, ctx_v: Tensor, pos: Tensor, mask: Tensor) -> Tensor:
        """h [N, B, d]; ctx_k/v [N, kv, S, hd]; pos [N, B]; mask [N, 1, B, S+B] (True = see)."""
        n, b, _ = h.shape
        cfg = self.cfg
        x = self.input_norm(h)
        q = self.q_norm(self.q_proj(x).view(n, b, cfg.num_heads, -1)).transpose(1, 2)
        q = _rope(q, pos.unsqueeze(1), cfg.rope_theta)
        kb = self.k_norm(self.k_proj(x).view(n, b, cfg.num_kv_heads, -1)).transpose(1, 2)
        kb = _rope(kb, pos.unsqueeze(1), cfg.rope_theta)
        vb = self.v_proj(x).view(n, b, cfg.num_kv_heads, -1).transpose(1, 2)
        k = torch.cat([ctx_k, kb], dim=2)
        v = torch.cat([ctx_v, vb], dim=2)
        rep = cfg.num_heads // cfg.num_kv_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        h = h + self.o_proj(a.transpose(1, 2).reshape(n, b, -1))
        y = self.post_norm(h)
        mlp: Tensor = self.down(F.silu(self.gate(y)) * self.up(y))
        return h + mlp
