"""`noc llm ...` commands: serve, ask, train-drafter, nf12, energy."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from noc_assistant.cli._console import console, err_console

if TYPE_CHECKING:  # torch and the serving stack are imported by the commands that use them
    from noc_assistant.serving.draft_heads import DrafterConfig
    from noc_assistant.serving.loading import TargetModel
    from noc_assistant.serving.train import FeatureSeq

__all__ = ["app"]

app = typer.Typer(help="llm commands", no_args_is_help=True)

VARIANTS = ("dspine", "dflash", "dspine-noinject")

DeviceOption = Annotated[
    str, typer.Option(help="cpu, cuda, cuda:N or auto (CUDA when torch sees a GPU)")
]


def _threads(n: int | None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if n:
        import torch

        torch.set_num_threads(n)


@app.command("train-drafter")
def train_drafter_cmd(
    out: Annotated[Path, typer.Option(help="folder for the drafter checkpoint")],
    variant: Annotated[str, typer.Option(help="dspine | dflash | dspine-noinject")] = "dspine",
    work_dir: Annotated[
        Path | None, typer.Option(help="cache for corpus and target features")
    ] = None,
    prompts: Annotated[int, typer.Option(help="number of generated NOC prompts")] = 256,
    traffic: Annotated[
        list[Path] | None,
        typer.Option(help="train on this traffic log of `noc llm serve --record` (repeatable)"),
    ] = None,
    max_new_tokens: Annotated[int, typer.Option(help="target answer length")] = 96,
    vocab_size: Annotated[int, typer.Option(help="reduced draft vocabulary size")] = 4096,
    block_size: Annotated[int, typer.Option(help="block size B (1 anchor + B-1 drafts)")] = 8,
    layers: Annotated[int, typer.Option(help="drafter layers")] = 2,
    intermediate: Annotated[int, typer.Option(help="drafter MLP width")] = 1024,
    steps: Annotated[
        int, typer.Option(help="optimiser steps (fixed budget; schedules run over them)")
    ] = 400,
    seconds: Annotated[
        float | None,
        typer.Option(help="optional wall-clock cap (makes the step count machine-dependent)"),
    ] = None,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    alignment_weight: Annotated[
        float, typer.Option(help="β of the layer-wise alignment loss (dspine.md §2.6: 0.5)")
    ] = 0.5,
    threads: Annotated[int, typer.Option(help="torch CPU threads")] = 1,
    tiny: Annotated[bool, typer.Option(help="use the tiny test model (smoke runs)")] = False,
    device: DeviceOption = "cpu",
) -> None:
    """Train a DSpine (or DFlash-style baseline) drafter for the default model."""
    _threads(threads)
    import time

    from noc_assistant.serving.draft_heads import save_drafter
    from noc_assistant.serving.train import TrainConfig, train_drafter

    if variant not in VARIANTS:
        raise typer.BadParameter(f"variant must be one of {', '.join(VARIANTS)}")
    if alignment_weight < 0.0:
        raise typer.BadParameter("--alignment-weight must be >= 0")
    target, vocab, data = _training_data(
        tiny, device, work_dir, prompts, seed, max_new_tokens, vocab_size, traffic or []
    )
    mcfg = _drafter_config(target, variant, layers, intermediate, block_size, vocab)
    tcfg = TrainConfig(
        steps=steps, seed=seed, max_seconds=seconds, alignment_weight=alignment_weight
    )

    trained_steps = 0

    def log(step: int, m: dict[str, float]) -> None:
        nonlocal trained_steps
        trained_steps = step + 1
        if step % 25 == 0 or step + 1 == steps:
            msg = " ".join(f"{k}={v:.4g}" for k, v in m.items())
            err_console.print(f"step {step} {msg}", highlight=False)

    t_train = time.perf_counter()
    model = train_drafter(target, mcfg, data, tcfg, log=log)
    save_drafter(model, out)
    info = {
        "variant": variant,
        "steps": steps,
        "steps_done": trained_steps,
        "seconds_cap": seconds,
        "train_s": round(time.perf_counter() - t_train, 1),
        "seed": seed,
        "prompts": prompts,
        "traffic": [str(t) for t in traffic or []],
        "block_size": block_size,
        "threads": threads,
        "alignment_weight": alignment_weight,
        "device": str(target.device),
    }
    (out / "train.json").write_text(json.dumps(info, indent=1))
    console.print(f"saved {variant} drafter to {out}")


def _training_data(
    tiny: bool,
    device: str,
    work_dir: Path | None,
    prompts: int,
    seed: int,
    max_new_tokens: int,
    vocab_size: int,
    traffic: list[Path],
) -> tuple[TargetModel, list[int], list[FeatureSeq]]:
    """The target of ``train-drafter``, its draft vocabulary and its answers' features."""
    import time

    from noc_assistant.serving.backends import load_default
    from noc_assistant.serving.loading import tiny_qwen3
    from noc_assistant.serving.train import prepare_data

    t0 = time.perf_counter()
    target = tiny_qwen3(device=device) if tiny else load_default(device=device)
    err_console.print(f"target {target.name} loaded in {time.perf_counter() - t0:.1f}s")

    def progress(stage: str, i: int, n: int) -> None:
        if i == n or i % 32 == 0:
            err_console.print(f"{stage} {i}/{n} ({time.perf_counter() - t0:.0f}s)")

    vocab, data = prepare_data(
        target,
        work_dir or Path.home() / ".cache" / "noc-assistant" / "train",
        n_prompts=prompts,
        seed=seed,
        max_new_tokens=max_new_tokens,
        vocab_size=vocab_size,
        progress=progress,
        traffic=traffic,
    )
    n_tok = sum(len(d.tokens) - d.prompt_len for d in data)
    err_console.print(f"{len(data)} sequences, {n_tok} answer tokens, draft vocab {len(vocab)}")
    return target, vocab, data


def _drafter_config(
    target: TargetModel,
    variant: str,
    layers: int,
    intermediate: int,
    block_size: int,
    vocab: list[int],
) -> DrafterConfig:
    """The drafter shape of a ``train-drafter`` variant (dflash: no DSpine parts; dspine-noinject:
    no injection after every layer)."""
    from noc_assistant.serving.draft_heads import DrafterConfig

    return DrafterConfig.for_target(
        target,
        num_layers=layers,
        intermediate_size=intermediate,
        block_size=block_size,
        dspine=variant != "dflash",
        inject_layers=variant == "dspine",
        refine=variant != "dflash",
        draft_vocab=vocab,
    )


def _load_engine(
    model: str,
    drafter: str | None,
    nf12: Path | None,
    tiny: bool,
    context: int | None,
    block_size: int | None = None,
    device: str = "cpu",
    max_running: int | None = None,
) -> object:
    from noc_assistant.serving.backends import load_default
    from noc_assistant.serving.draft_heads import load_drafter
    from noc_assistant.serving.engine import Engine
    from noc_assistant.serving.loading import (
        DEFAULT_MODEL_NAME,
        load_hf_dir,
        tiny_qwen3,
    )
    from noc_assistant.serving.nf12 import load_nf12_model

    if tiny:
        target = tiny_qwen3(device=device)
    elif nf12 is not None:
        target = load_nf12_model(nf12, name=DEFAULT_MODEL_NAME, device=device)  # type: ignore[assignment]
    elif model == DEFAULT_MODEL_NAME:
        target = load_default(device=device)
    else:
        target = load_hf_dir(model, device=device)
    on_cpu = target.device.type == "cpu"
    drafter = _drafter_of(drafter, tiny, on_cpu)
    d = None
    if drafter and drafter != "none":
        if block_size is None and on_cpu and Path(drafter) == Path(_default_drafter()):
            block_size = DEFAULT_CPU_BLOCK
        d = load_drafter(Path(drafter), target, block_size=block_size)
    return Engine(target, d, context=context, max_running=max_running)


#: Block size the committed drafter runs at on a CPU when asked for (``--drafter default``):
#: B=3 was its fastest setting on the transformers backend (1.57x target-only, 1 thread).
#: On a GPU the trained block size is used; ``--block-size`` overrides both.
DEFAULT_CPU_BLOCK = 3


def _drafter_of(drafter: str | None, tiny: bool, on_cpu: bool) -> str | None:
    """The drafter folder to load (None or ``"none"``: target-only decoding) for ``--drafter``.

    ``"default"`` names the committed DSpine drafter. Left out, a GPU uses that drafter and a
    CPU decodes target-only: on the native Q4_1 engine a forward over n new tokens costs
    nearly n single-token forwards (n=3 costs 2.1x n=1 on a Sapphire Rapids core, n=4 2.6x
    on an EPYC core), so DSpine at B=2-4 ran at 0.59-0.70x target-only decoding (BENCHMARKS.md,
    "DSpine on the native engine"). Target-only is the fastest lossless path a CPU has.

    >>> _drafter_of(None, False, True) is None
    True
    >>> _drafter_of("default", False, True) == _default_drafter()
    True
    >>> _drafter_of(None, False, False) == _default_drafter()
    True
    """
    if drafter == "default" or (drafter is None and not tiny and not on_cpu):
        return _default_drafter()
    return drafter


_DRAFTER_HELP = (
    "drafter folder, 'default' for the committed DSpine drafter, or 'none' "
    "(left out: none on a CPU, the DSpine drafter on a GPU)"
)


def _default_drafter() -> str:
    return str(Path(__file__).resolve().parents[1] / "serving" / "weights" / "smollm2-dspine-b8")


@app.command("serve")
def serve_cmd(
    host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8000,
    model: Annotated[str, typer.Option(help="model id or HF folder")] = "smollm2-135m-instruct",
    drafter: Annotated[str | None, typer.Option(help=_DRAFTER_HELP)] = None,
    nf12: Annotated[Path | None, typer.Option(help="serve weights from this NF12 folder")] = None,
    context: Annotated[int | None, typer.Option(help="maximum context tokens")] = None,
    threads: Annotated[int, typer.Option(help="torch CPU threads")] = 2,
    tiny: Annotated[bool, typer.Option(help="serve the tiny test model")] = False,
    block_size: Annotated[
        int | None,
        typer.Option(help="drafter block size (default: 3 for the committed drafter on CPU)"),
    ] = None,
    device: DeviceOption = "cpu",
    max_running: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="requests run at once, their decoding steps batched "
            "(default: 4 on the native CPU engine, else 1)",
        ),
    ] = None,
    record: Annotated[
        Path | None,
        typer.Option(help="append every answered non-streamed request to this JSON-lines log"),
    ] = None,
) -> None:
    """Serve the model over an OpenAI-compatible HTTP API (DSpine speculative decoding on a
    GPU, or on a CPU with ``--drafter default``; concurrent requests share forwards)."""
    _threads(threads)
    import uvicorn

    from noc_assistant.serving.server import create_app
    from noc_assistant.serving.traffic import TrafficLog

    engine = _load_engine(model, drafter, nf12, tiny, context, block_size, device, max_running)
    err_console.print(f"serving {engine.name} on http://{host}:{port}/v1")  # type: ignore[attr-defined]
    log = TrafficLog(record) if record is not None else None
    app_ = create_app(engine, traffic=log)  # type: ignore[arg-type]
    uvicorn.run(app_, host=host, port=port, log_level="info")


@app.command("ask")
def ask_cmd(
    question: Annotated[str, typer.Argument(help="the question")],
    max_tokens: Annotated[int, typer.Option(help="answer length limit")] = 128,
    model: Annotated[str, typer.Option(help="model id or HF folder")] = "smollm2-135m-instruct",
    drafter: Annotated[str | None, typer.Option(help=_DRAFTER_HELP)] = None,
    threads: Annotated[int, typer.Option(help="torch CPU threads")] = 2,
    tiny: Annotated[bool, typer.Option(help="use the tiny test model")] = False,
    stats: Annotated[bool, typer.Option(help="print decoding statistics")] = False,
    block_size: Annotated[
        int | None,
        typer.Option(help="drafter block size (default: 3 for the committed drafter on CPU)"),
    ] = None,
    device: DeviceOption = "cpu",
) -> None:
    """Answer one question with the built-in engine (no server)."""
    _threads(threads)
    from noc_assistant.serving.engine import Engine, Request

    engine = _load_engine(model, drafter, None, tiny, None, block_size, device)
    assert isinstance(engine, Engine)
    prompt = engine.encode_chat([{"role": "user", "content": question}])
    toks, st = engine.generate(Request(prompt, max_tokens))
    console.print(engine.target.tokenizer.decode(toks), highlight=False, markup=False)
    if stats:
        err_console.print(
            f"{st.output_tokens} tokens in {st.time_total:.2f}s, rounds={st.rounds}, "
            f"tau={st.mean_accept_length:.2f}, finish={st.finish_reason}"
        )


@app.command("nf12")
def nf12_cmd(
    out: Annotated[Path | None, typer.Option(help="output folder")] = None,
    src: Annotated[Path | None, typer.Option(help="BF16 model folder (default model)")] = None,
) -> None:
    """Convert the (default) model's BF16 weights to NF12; verify the round trip bit-exactly."""
    import torch
    from safetensors.torch import load_file

    from noc_assistant.serving.backends import load_default
    from noc_assistant.serving.loading import DEFAULT_MODEL_NAME, model_cache_dir
    from noc_assistant.serving.nf12 import NF12_FILE, convert_model_dir, load_nf12

    if out is None:
        out = model_cache_dir() / f"{DEFAULT_MODEL_NAME}-nf12"
    if src is None:  # the bf16 folder the transformers backend converts the GGUF into
        load_default(backend="transformers")
        src = model_cache_dir() / DEFAULT_MODEL_NAME
    rep = convert_model_dir(src, out)
    dec = load_nf12(out / NF12_FILE)
    exact = 0
    for f in sorted(src.glob("*.safetensors")):
        for k, v in load_file(str(f)).items():
            exact += int(torch.equal(v.view(torch.int16), dec[k].view(torch.int16)))
    console.print(
        f"{rep.tensors} tensors, {rep.values} values, escapes {rep.escapes} "
        f"({100 * rep.escape_rate:.3f}%), BF16 {rep.bf16_bytes / 1e6:.1f} MB -> "
        f"NF12 {rep.nf12_bytes / 1e6:.1f} MB ({100 * rep.ratio:.1f}%), "
        f"bit-exact {exact}/{rep.tensors}",
        highlight=False,
    )
    console.print(
        "NF12 is a storage format: `noc llm serve --nf12` decodes it on load (bit-exact BF16) "
        "and runs in fp32 on a CPU, bf16 on a GPU; it saves disk, not memory.",
        highlight=False,
    )


@app.command("energy")
def energy_cmd(
    input_tokens: Annotated[int, typer.Option(help="input tokens I")] = 68_000,
    output_tokens: Annotated[int, typer.Option(help="output tokens O")] = 247,
    cached: Annotated[int, typer.Option(help="input tokens served from a prefix cache")] = 0,
    hidden: Annotated[int, typer.Option(help="hidden size d")] = 4096,
    layers: Annotated[int, typer.Option(help="layers L")] = 32,
    kv_ratio: Annotated[float, typer.Option(help="R = kv heads / q heads")] = 0.25,
) -> None:
    """SIMPLE energy estimate of one request (placeholder θ implied by Llama 3.1 8B)."""
    from noc_assistant.serving.simple import LLAMA31_8B_IMPLIED, ModelShape, predict

    e = predict(
        LLAMA31_8B_IMPLIED,
        ModelShape(hidden, layers, kv_ratio),
        input_tokens,
        output_tokens,
        cached=cached,
    )
    console.print(
        f"prefill {e.prefill:.1f} J, KV read {e.kv_read:.1f} J, per-token {e.per_token:.1f} J, "
        f"total {e.total:.1f} J",
        highlight=False,
    )
