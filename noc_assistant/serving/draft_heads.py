"""Block drafters for speculative decoding.

* :class:`BlockDrafterModel`: the DFlash-style parallel block drafter (research/dspine.md §3):
  fused taps of target hidden layers -> context rows injected as extra K/V into every draft
  layer; input ``[anchor, MASK×(B-1)]``; one forward drafts B-1 tokens. With
  ``DrafterConfig.dspine`` it grows the DSpine parts (§2): gated adjacent injection after every
  layer (``inject_layers``) and the final correction through a top-K transition cache
  (``refine``). Attention inside the block is causal (``causal_block``) or bidirectional.
  The target's input embedding and LM head are shared and frozen (bound with :meth:`bind`, not
  saved); the head is restricted to a reduced draft vocabulary (``draft_vocab``, target ids).
* :class:`NeuralDrafter`: inference wrapper with a draft KV cache of the context rows (or
  without: recompute every round; both give identical drafts).
* :class:`OracleDrafter`: proposes a known reference continuation (for tests and upper bounds).

:class:`DrafterConfig` and the layers the drafter is built of are in
:mod:`noc_assistant.serving.draft_layers`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, cast

import torch
from torch import Tensor, nn

from noc_assistant.serving.draft_layers import DrafterConfig, DraftLayer, RMSNorm
from noc_assistant.serving.dspine import AdjacentInjection, TransferSpace, transition_select
from noc_assistant.serving.errors import ModelLoadError
from noc_assistant.serving.loading import TargetModel

__all__ = [
    "BlockDrafterModel",
    "DraftOutput",
    "Drafter",
    "DrafterConfig",
    "NeuralDrafter",
    "OracleDrafter",
    "Proposal",
    "init_scale_",
    "load_drafter",
    "new_drafter",
    "save_drafter",
]


@dataclass
class DraftOutput:
    """Block forward results: ``logits`` [N, B-1, Vd] (offsets 1..B-1) and DSpine extras."""

    logits: Tensor
    pre_injection: Tensor
    layer_features: list[Tensor]


class BlockDrafterModel(nn.Module):
    """DFlash-style parallel block drafter, optionally with the DSpine injection and refine."""

    draft_vocab: Tensor

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.fc = nn.Linear(cfg.n_taps * d, d, bias=False)
        self.hidden_norm = RMSNorm(d, cfg.eps)
        self.layers = nn.ModuleList(DraftLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(d, cfg.eps)
        self.mask_embedding = nn.Parameter(torch.zeros(d))
        self.register_buffer("draft_vocab", torch.tensor(cfg.draft_vocab, dtype=torch.long))
        self.space: TransferSpace | None = None
        self.injection: AdjacentInjection | None = None
        if cfg.dspine:
            self.space = TransferSpace(d, cfg.transfer_rank)
            self.injection = AdjacentInjection(
                d, cfg.transfer_rank, cfg.message_size, cfg.num_layers
            )
        self._embed: Tensor | None = None
        self._head_full: Tensor | None = None
        self._head: Tensor | None = None
        self._codes: Tensor | None = None
        self._codes_key: tuple[int, ...] | None = None

    # -- binding to the target -------------------------------------------------------------
    def bind(self, target: TargetModel, *, fit_space: bool = False) -> None:
        """Share the target's frozen embedding and LM head (and fit the transfer space)."""
        emb = target.model.get_input_embeddings().weight.detach().float()
        head = target.lm_head_weight.detach().float()
        self._embed = emb
        self._head_full = head
        if self.draft_vocab.numel() == 0:
            self.draft_vocab = torch.arange(head.shape[0], device=head.device)
        self._head = head[self.draft_vocab].contiguous()
        self._codes = None
        if fit_space and self.space is not None and self.injection is not None:
            self.space.fit(head)
            self.injection.init_readouts(self.space)

    def _bound(self) -> tuple[Tensor, Tensor, Tensor]:
        if self._embed is None or self._head is None or self._head_full is None:
            raise ModelLoadError("drafter is not bound to a target (call bind)")
        return self._embed, self._head, self._head_full

    def token_codes(self, target_ids: Tensor) -> Tensor:
        """``e(v)`` for target token ids (any shape) -> [..., r]."""
        assert self.space is not None
        _, _, head_full = self._bound()
        return self.space.codes(head_full[target_ids])

    # -- forward ---------------------------------------------------------------------------
    def context(self, features: Tensor) -> Tensor:
        """Fused context rows ``RMSNorm(fc(taps))`` for features [G, S, n_taps*d]."""
        ctx: Tensor = self.hidden_norm(self.fc(features))
        return ctx

    def context_kv(self, features: Tensor, start: int = 0) -> list[tuple[Tensor, Tensor]]:
        """Per-layer (K, V) [G, kv, S, hd] of context rows at positions start..start+S-1."""
        ctx = self.context(features)
        pos = torch.arange(start, start + ctx.shape[1], device=ctx.device)
        return [cast(DraftLayer, layer).kv(ctx, pos) for layer in self.layers]

    def blocks(
        self,
        kv: list[tuple[Tensor, Tensor]],
        seq_index: Tensor,
        anchors: Tensor,
        anchor_tokens: Tensor,
        replace_codes: Tensor | None = None,
        replace_mask: Tensor | None = None,
        replacement_layers: int = 3,
    ) -> DraftOutput:
        """Draft N blocks. Block n starts at position ``anchors[n]`` of sequence
        ``seq_index[n]`` and sees the context rows before it.

        ``replace_codes`` [N, B-1, r] and ``replace_mask`` [N] (training, DSpine): in the first
        ``replacement_layers`` layers the masked blocks use teacher-forced predecessor codes.
        """
        cfg = self.cfg
        embed, head, _ = self._bound()
        n, b = anchors.shape[0], cfg.block_size
        s = kv[0][0].shape[2]
        h = torch.cat(
            [embed[anchor_tokens].unsqueeze(1), self.mask_embedding.expand(n, b - 1, -1)], dim=1
        )
        dev = h.device
        pos = anchors.unsqueeze(1) + torch.arange(b, device=dev)
        ctx_mask = torch.arange(s, device=dev).unsqueeze(0) < anchors.unsqueeze(1)
        if cfg.causal_block:
            blk = torch.ones(b, b, dtype=torch.bool, device=dev).tril()
        else:
            blk = torch.ones(b, b, dtype=torch.bool, device=dev)
        mask = torch.cat(
            [ctx_mask.unsqueeze(1).expand(n, b, s), blk.unsqueeze(0).expand(n, b, b)], dim=2
        ).unsqueeze(1)
        anchor_code = None
        inj = self.injection
        use_inj = inj is not None and cfg.inject_layers
        if inj is not None:
            anchor_code = self.token_codes(anchor_tokens)
        feats: list[Tensor] = []
        pre = h
        for li, layer in enumerate(self.layers):
            ck, cv = kv[li]
            if ck.shape[0] != n:
                ck, cv = ck[seq_index], cv[seq_index]
            h = layer(h, ck, cv, pos, mask)
            pre = h
            if use_inj:
                assert inj is not None and anchor_code is not None
                rep = replace_codes if li < replacement_layers else None
                h, f = inj.inject(li, h, anchor_code, rep, replace_mask)
                feats.append(f)
        hidden = self.norm(h[:, 1:])
        return DraftOutput(logits=hidden @ head.T, pre_injection=pre[:, 1:], layer_features=feats)

    def refine_scores(self, pre: Tensor, pred_codes: Tensor, cand: Tensor) -> Tensor:
        """Scores of candidates ``cand`` [..., K] (draft ids) after the last-layer write with
        predecessor codes ``pred_codes`` [..., r] applied to states ``pre`` [..., d]."""
        assert self.injection is not None
        _, head, _ = self._bound()
        last = self.cfg.num_layers - 1
        f = self.injection.feature(last, pre)
        refined = self.norm(self.injection.write(last, pre, f, pred_codes))
        return torch.einsum("...d,...kd->...k", refined, head[cand])

    def _draft_codes(self) -> Tensor:
        """``e(v)`` of every draft-vocabulary token [Vd, r], computed once and cached.

        The codes depend only on the frozen transfer space and LM head; the cache is keyed on
        their tensor versions, so refitting or reloading the space invalidates it.
        """
        assert self.space is not None
        _, _, head_full = self._bound()
        sp = self.space
        key = (
            id(head_full),
            sp.basis._version,
            sp.mean._version,
            sp.scale._version,
            self.draft_vocab._version,
            self.draft_vocab.data_ptr(),
        )
        if self._codes_key != key or self._codes is None:
            with torch.no_grad():
                self._codes = sp.codes(head_full[self.draft_vocab])
            self._codes_key = key
        return self._codes

    @torch.no_grad()
    def transition_table(self, pre: Tensor, anchor_token: int, cand: Tensor) -> Tensor:
        """The DSpine transition cache of one block, as batched tensor ops.

        ``pre`` [P, d]: pre-injection last-layer states of offsets 1..P; ``cand`` [P, K]: top-K
        draft ids per offset. Returns ``T`` [P, K(a), K(b)]: the refined score of candidate b at
        offset i given that candidate a of offset i-1 was chosen (the anchor for i = 0, so all
        rows of ``T[0]`` are equal). Equals ``refine_scores`` on the expanded inputs, but the
        receiver readout, gate and RMS are computed once per offset (not once per (a, b)), the
        codes come from a cached table and the scores are one batched matmul against the K
        candidate rows (no [P, K, K, d] gather).
        """
        assert self.injection is not None and self.space is not None
        inj = self.injection
        _, head, head_full = self._bound()
        last = self.cfg.num_layers - 1
        k = cand.shape[1]
        codes = self._draft_codes()[cand]  # [P, K, r]
        anchor = self.space.codes(head_full[anchor_token].unsqueeze(0))  # [1, r]
        pred = torch.cat([anchor.expand(k, -1).unsqueeze(0), codes[:-1]], dim=0)  # [P, K(a), r]
        f = inj.feature(last, pre)  # [P, r]
        gate = torch.sigmoid(
            inj.receiver_gate(f).unsqueeze(1) + inj.predecessor_gate(pred) + inj.gate_bias
        )
        delta: Tensor = inj.writes[last](gate * inj.message(pred))  # [P, K(a), d]
        rms = pre.norm(dim=-1, keepdim=True) / math.sqrt(inj.hidden_size)  # [P, 1]
        refined = self.norm(pre.unsqueeze(1) + rms.unsqueeze(1) * delta)  # [P, K(a), d]
        return torch.bmm(refined, head[cand].transpose(1, 2))  # [P, K(a), K(b)]

    def _candidates(self, out: DraftOutput) -> Tensor:
        logits = out.logits[0]
        k = min(self.cfg.top_k, logits.shape[-1])
        return logits.topk(k, dim=-1).indices  # [P, K] draft ids

    @torch.no_grad()
    def select(self, out: DraftOutput, anchor_token: int) -> Tensor:
        """Choose B-1 draft ids for one block (argmax, or the transition cache with refine)."""
        if self.injection is None or not self.cfg.refine:
            return out.logits[0].argmax(-1)
        cand = self._candidates(out)
        table = self.transition_table(out.pre_injection[0], anchor_token, cand)
        return transition_select(table, cand)

    @torch.no_grad()
    def select_reference(self, out: DraftOutput, anchor_token: int) -> Tensor:
        """Unoptimised :meth:`select` (expanded ``refine_scores`` per (a, b)); for tests."""
        logits = out.logits[0]
        if self.injection is None or not self.cfg.refine:
            return logits.argmax(-1)
        cand = self._candidates(out)
        p, k = cand.shape
        codes = self.token_codes(self.draft_vocab[cand])  # [P, K, r]
        anchor = self.token_codes(torch.tensor([anchor_token], device=cand.device)).expand(k, -1)
        pred = torch.cat([anchor.unsqueeze(0), codes[:-1]], dim=0)  # [P, K(a), r]
        pre = out.pre_injection[0].unsqueeze(1).expand(p, k, -1)  # [P, K(a), d]
        table = self.refine_scores(pre, pred, cand.unsqueeze(1).expand(p, k, k))
        a = 0
        chosen = []
        for i in range(p):
            b = int(torch.argmax(table[i, a]))
            chosen.append(int(cand[i, b]))
            a = b
        return torch.tensor(chosen, dtype=torch.long, device=cand.device)

    @torch.no_grad()
    def refine_distributions(self, out: DraftOutput, anchor_token: int) -> tuple[Tensor, Tensor]:
        """Candidates [P, K] (draft ids) and the transition table [P, K, K] (for sampling)."""
        cand = self._candidates(out)
        return cand, self.transition_table(out.pre_injection[0], anchor_token, cand)


class Proposal:
    """B-1 proposed target ids and, for sampling, their proposal distributions [B-1, V]."""

    def __init__(self, tokens: list[int], probs: Tensor | None = None) -> None:
        self.tokens = tokens
        self.probs = probs


class Drafter(Protocol):
    """What the speculative loop needs from a drafter."""

    block_size: int

    def begin(self, features: Tensor) -> None:
        """Start a request with the prompt's target features [n, F]."""

    def extend(self, features: Tensor) -> None:
        """Append target features of newly committed positions."""

    def propose(
        self,
        tokens: Sequence[int],
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Proposal:
        """Draft the B-1 tokens after ``tokens`` (the last one is the anchor)."""


class OracleDrafter:
    """Proposes ``reference[len(tokens):]`` (a known continuation), padded with ``pad``."""

    def __init__(self, reference: Sequence[int], block_size: int, pad: int = 0) -> None:
        self.reference = list(reference)
        self.block_size = block_size
        self.pad = pad

    def begin(self, features: Tensor) -> None:
        return None

    def extend(self, features: Tensor) -> None:
        return None

    def propose(
        self,
        tokens: Sequence[int],
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Proposal:
        n = len(tokens)
        out = self.reference[n : n + self.block_size - 1]
        return Proposal(out + [self.pad] * (self.block_size - 1 - len(out)))


class NeuralDrafter:
    """Runs a :class:`BlockDrafterModel` during decoding, with or without a draft KV cache."""

    def __init__(self, model: BlockDrafterModel, *, use_cache: bool = True) -> None:
        self.model = model.eval()
        self.block_size = model.cfg.block_size
        self.use_cache = use_cache
        self._features: list[Tensor] = []
        self._kv: list[tuple[Tensor, Tensor]] = []
        self._length = 0

    def begin(self, features: Tensor) -> None:
        self._features, self._kv, self._length = [], [], 0
        self.extend(features)

    @property
    def length(self) -> int:
        """Context positions whose target features the drafter holds."""
        return self._length

    def crop(self, length: int) -> None:
        """Keep the first ``length`` context positions (a prefix reused by the next request)."""
        if length >= self._length:
            return
        if self.use_cache:
            self._kv = [(k[:, :, :length], v[:, :, :length]) for k, v in self._kv]
        elif self._features:
            self._features = [torch.cat(self._features, dim=0)[:length]]
        self._length = length

    @torch.no_grad()
    def extend(self, features: Tensor) -> None:
        if features.shape[0] == 0:
            return
        if self.use_cache:
            new = self.model.context_kv(features.unsqueeze(0), start=self._length)
            if self._kv:
                self._kv = [
                    (torch.cat([k0, k1], dim=2), torch.cat([v0, v1], dim=2))
                    for (k0, v0), (k1, v1) in zip(self._kv, new, strict=True)
                ]
            else:
                self._kv = new
        else:
            self._features.append(features)
        self._length += features.shape[0]

    @torch.no_grad()
    def forward_block(self, anchor_token: int) -> DraftOutput:
        if self.use_cache:
            kv = self._kv
        else:
            kv = self.model.context_kv(torch.cat(self._features, dim=0).unsqueeze(0))
        dev = self.model.mask_embedding.device
        return self.model.blocks(
            kv,
            torch.zeros(1, dtype=torch.long, device=dev),
            torch.tensor([self._length], device=dev),
            torch.tensor([anchor_token], device=dev),
        )

    @torch.no_grad()
    def propose(
        self,
        tokens: Sequence[int],
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Proposal:
        if len(tokens) - 1 != self._length:
            raise ValueError(f"drafter has {self._length} context rows, expected {len(tokens) - 1}")
        anchor = int(tokens[-1])
        out = self.forward_block(anchor)
        vocab = self.model.draft_vocab
        if temperature <= 0.0:
            ids = self.model.select(out, anchor)
            return Proposal(vocab[ids].tolist())
        return self._sample(out, anchor, temperature, generator)

    def _sample(
        self, out: DraftOutput, anchor: int, temperature: float, generator: torch.Generator | None
    ) -> Proposal:
        # sampling runs on the CPU, where ``generator`` lives (small tensors: B-1 rows)
        m = self.model
        vocab = m.draft_vocab.cpu()
        _, _, head_full = m._bound()
        v_full = head_full.shape[0]
        p_count = out.logits.shape[1]
        probs = torch.zeros(p_count, v_full)
        tokens: list[int] = []
        if m.injection is None or not m.cfg.refine:
            pd = torch.softmax(out.logits[0].float().cpu() / temperature, dim=-1)
            probs[:, vocab] = pd
            for i in range(p_count):
                tokens.append(int(vocab[torch.multinomial(pd[i], 1, generator=generator)]))
            return Proposal(tokens, probs)
        cand, table = m.refine_distributions(out, anchor)
        cand, table = cand.cpu(), table.float().cpu()
        a = 0
        for i in range(p_count):
            dist = torch.softmax(table[i, a] / temperature, dim=-1)
            b = int(torch.multinomial(dist, 1, generator=generator))
            probs[i, vocab[cand[i]]] = dist
            tokens.append(int(vocab[cand[i, b]]))
            a = b
        return Proposal(tokens, probs)


def save_drafter(
    model: BlockDrafterModel, path: str | Path, *, dtype: torch.dtype = torch.bfloat16
) -> None:
    """Save config (JSON) and weights (safetensors) to folder ``path``."""
    from safetensors.torch import save_file

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    (p / "config.json").write_text(json.dumps(asdict(model.cfg), indent=1))
    state = {}
    for k, v in model.state_dict().items():
        keep_fp32 = k.startswith("space.") or k == "draft_vocab"
        state[k] = v.contiguous() if keep_fp32 else v.to(dtype).contiguous()
    save_file(state, str(p / "model.safetensors"))


def load_drafter(
    path: str | Path, target: TargetModel, *, block_size: int | None = None
) -> BlockDrafterModel:
    """Load a drafter folder written by :func:`save_drafter` and bind it to ``target``.

    ``block_size`` smaller than the trained one runs the drafter on shorter blocks. With a
    causal block this is exact truncation: offset i sees only the context, offsets ≤ i and the
    adjacent message from i-1, so the first b-1 drafts equal those of the full block.
    """
    from safetensors.torch import load_file

    p = Path(path)
    try:
        cfg = DrafterConfig(**json.loads((p / "config.json").read_text()))
        state = load_file(str(p / "model.safetensors"))
    except (OSError, TypeError, ValueError) as exc:
        raise ModelLoadError(f"cannot load drafter {p}: {exc}") from exc
    if block_size is not None and block_size != cfg.block_size:
        if not cfg.causal_block or not 2 <= block_size <= cfg.block_size:
            raise ModelLoadError(
                f"drafter {p} (block {cfg.block_size}, causal={cfg.causal_block}) cannot run "
                f"at block size {block_size}"
            )
        cfg = DrafterConfig(**{**asdict(cfg), "block_size": block_size})
    if cfg.hidden_size != target.hidden_size:
        raise ModelLoadError(
            f"drafter {p} has hidden size {cfg.hidden_size}, target {target.hidden_size}"
        )
    model = BlockDrafterModel(cfg).to(target.device)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    model.bind(target)
    return model.eval()


def init_scale_(model: BlockDrafterModel, std: float = 0.02, seed: int = 0) -> None:
    """Seeded normal init of the backbone's linear layers (DSpine writes stay zero)."""
    g = torch.Generator().manual_seed(seed)
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and not name.startswith("injection"):
            with torch.no_grad():
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=g) * std)


def new_drafter(
    target: TargetModel, cfg: DrafterConfig, *, seed: int = 0, std: float = 0.02
) -> BlockDrafterModel:
    """A freshly initialised drafter bound to ``target`` (seeded; transfer space fitted).

    The backbone init depends only on ``seed``, so a DSpine and a DFlash drafter built with
    the same seed share their backbone weights.
    """
    model = BlockDrafterModel(cfg)
    init_scale_(model, std=std, seed=seed)
    model = model.to(target.device)
    model.bind(target, fit_space=True)
    return model.eval()
