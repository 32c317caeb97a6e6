"""DSpine parts on top of the DFlash backbone (research/dspine.md §2.3-§2.5).

* :class:`TransferSpace`: PCA-whitened, unit-norm token codes built once from the target LM
  head (``c_v = normalize(Uᵀ(ŵ_v − μ)/sqrt(λ))``), frozen; codes are computed on demand.
* :class:`AdjacentInjection`: after every backbone layer, each block position i ≥ 1 receives a
  gated message from its predecessor (the anchor's code for i = 1, the predecessor's predicted
  feature otherwise); all messages read the pre-update states. Writes are zero-initialised, so
  a fresh DSpine equals its DFlash backbone.
* :func:`transition_select`: the final correction. Top-K candidates per position, a [P, K, K]
  table of refined scores given each candidate predecessor, then a sequential walk that is only
  table lookups.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["AdjacentInjection", "TransferSpace", "transition_select"]


class TransferSpace(nn.Module):
    """Frozen transfer space of rank ``r`` from the target output embeddings ``W`` [V, d]."""

    basis: Tensor
    mean: Tensor
    scale: Tensor

    def __init__(self, hidden_size: int, rank: int) -> None:
        super().__init__()
        self.rank = rank
        self.register_buffer("basis", torch.zeros(hidden_size, rank))
        self.register_buffer("mean", torch.zeros(hidden_size))
        self.register_buffer("scale", torch.ones(rank))

    @torch.no_grad()
    def fit(self, weight: Tensor, chunk: int = 4096) -> None:
        """Compute the PCA basis from the row-normalised ``weight`` (fp32, in chunks)."""
        w = weight.detach().float()
        v, d = w.shape
        if not 0 < self.rank <= min(d, v - 1):
            raise ValueError(f"transfer rank {self.rank} must be in 1..{min(d, v - 1)}")
        mu = torch.zeros(d, device=w.device)
        for i in range(0, v, chunk):
            mu += F.normalize(w[i : i + chunk], dim=-1).sum(0)
        mu /= v
        scatter = torch.zeros(d, d, device=w.device)
        for i in range(0, v, chunk):
            x = F.normalize(w[i : i + chunk], dim=-1)
            scatter += x.T @ x
        scatter -= v * torch.outer(mu, mu)
        lam, vec = torch.linalg.eigh(scatter.double())
        lam, vec = lam[-self.rank :].float(), vec[:, -self.rank :].float()
        if bool((lam <= 0).any()):
            raise ValueError("transfer space has non-positive eigenvalues; lower the rank")
        self.basis.copy_(vec)
        self.mean.copy_(mu)
        self.scale.copy_(lam.rsqrt())

    def codes(self, rows: Tensor) -> Tensor:
        """Scaled codes ``e(v) = sqrt(r)·c_v`` for output-embedding rows [..., d] -> [..., r]."""
        x = F.normalize(rows.float(), dim=-1) - self.mean
        c = F.normalize((x @ self.basis) * self.scale, dim=-1)
        return c * math.sqrt(self.rank)


class AdjacentInjection(nn.Module):
    """Gated adjacent injection; shared message/gates, per-layer readouts and writes."""

    def __init__(self, hidden_size: int, rank: int, message_size: int, num_layers: int) -> None:
        super().__init__()
        self.rank = rank
        self.hidden_size = hidden_size
        self.message = nn.Linear(rank, message_size, bias=False)
        self.receiver_gate = nn.Linear(rank, message_size, bias=False)
        self.predecessor_gate = nn.Linear(rank, message_size, bias=False)
        self.gate_bias = nn.Parameter(torch.zeros(message_size))
        self.readouts = nn.ModuleList(
            nn.Linear(hidden_size, rank, bias=False) for _ in range(num_layers)
        )
        self.writes = nn.ModuleList(
            nn.Linear(message_size, hidden_size, bias=False) for _ in range(num_layers)
        )
        nn.init.zeros_(self.predecessor_gate.weight)
        for w in self.writes:
            nn.init.zeros_(cast(nn.Linear, w).weight)

    def init_readouts(self, space: TransferSpace) -> None:
        """Initialise every readout ``R_l`` to the PCA directions ``Uᵀ`` (then trained)."""
        with torch.no_grad():
            for r in self.readouts:
                cast(nn.Linear, r).weight.copy_(space.basis.T)

    def feature(self, layer: int, h: Tensor) -> Tensor:
        """``φ_l(h) = sqrt(r)·normalize(R_l h)``."""
        r: Tensor = self.readouts[layer](h)
        return F.normalize(r.float(), dim=-1) * math.sqrt(self.rank)

    def write(self, layer: int, h: Tensor, f: Tensor, p: Tensor) -> Tensor:
        """Return ``h + rms(h)·W_l(σ(G_r f + G_p p + b) ⊙ M p)`` (receiver feature f, pred p)."""
        g = torch.sigmoid(self.receiver_gate(f) + self.predecessor_gate(p) + self.gate_bias)
        delta: Tensor = self.writes[layer](g * self.message(p))
        rms: Tensor = h.norm(dim=-1, keepdim=True) / math.sqrt(self.hidden_size)
        out: Tensor = h + rms * delta
        return out

    def inject(
        self,
        layer: int,
        h: Tensor,
        anchor_code: Tensor,
        replace: Tensor | None = None,
        replace_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Inject into block states ``h`` [N, B, d]; return (new h, features of new h).

        ``anchor_code`` [N, r] is ``e(x_anchor)``. ``replace`` [N, B-1, r] (training only)
        gives teacher-forced predecessor codes, used instead of the predicted features in the
        blocks where ``replace_mask`` [N] is True.
        """
        f = self.feature(layer, h)
        p = torch.cat([anchor_code.unsqueeze(1), f[:, 1:-1]], dim=1)
        if replace is not None and replace_mask is not None:
            p = torch.where(replace_mask[:, None, None], replace, p)
        rest = self.write(layer, h[:, 1:], f[:, 1:], p)
        out = torch.cat([h[:, :1], rest], dim=1)
        return out, self.feature(layer, out)


def transition_select(table: Tensor, candidates: Tensor) -> Tensor:
    """Greedy walk over ``table`` [P, K, K]; return the chosen candidate ids [P].

    Row ``a`` of ``table[i]`` scores the candidates of position i given that candidate ``a`` of
    position i-1 was chosen (position 0's predecessor is the anchor: all rows equal). The
    argmax of every row is one tensor op; the walk itself is P list look-ups
    (``a_i = best[i][a_{i-1}]``, ``a_0`` from row 0), then one gather.

    >>> t = torch.zeros(2, 2, 2); t[0, 0, 1] = 1.0; t[1, 1, 0] = 1.0
    >>> transition_select(t, torch.tensor([[5, 6], [7, 8]])).tolist()
    [6, 7]
    """
    best: list[list[int]] = table.argmax(dim=-1).tolist()  # [P][K(a)] -> b*
    path: list[int] = []
    a = 0
    for row in best:
        a = row[a]
        path.append(a)
    idx = torch.tensor(path, dtype=torch.long, device=candidates.device)
    return candidates.gather(1, idx.unsqueeze(1)).squeeze(1)
