"""What happens between prompt and answer, in plain words, with one model's own numbers.

:func:`explain_facts` gathers the numbers (every memory figure is the estimator's own:
:func:`app.predict.estimate.estimate` for the settings, and for the "what if" figures the same
function with one setting changed); :func:`explain_model` turns them into
:class:`Section` objects (a title, a few paragraphs, the key numbers with their units) for
a reader with no machine-learning background. Both are pure and fast (a few estimates, no
I/O), so the desktop's Explain tab can call them after the sliders rest.

Example::

    est = estimate(spec, settings, hardware)
    for section in explain_model(spec, settings, est, hardware):
        print(section.title, *section.paragraphs, sep="\\n")
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.model.spec import ModelSpec
from app.planning.options import own_quant_name
from app.predict.estimate import MemoryEstimate, estimate, place_layers
from app.predict.speed import SpeedFactors, gpu_step_cpu_s, predict_speed, workload
from app.settings import CacheType, Settings
from app.units import format_bytes, format_tps, speed_depth

_CACHE_BITS: Final[dict[str, str]] = {
    "f32": "32-bit",
    "f16": "16-bit",
    "bf16": "16-bit",
    "q8_0": "8-bit",
    "q5_0": "5-bit",
    "q5_1": "5-bit",
    "q4_0": "4-bit",
    "q4_1": "4-bit",
    "iq4_nl": "4-bit",
}


@dataclass(frozen=True, slots=True)
class KeyNumber:
    """One number worth remembering: ``text`` is the value with its unit ("18.0 KiB")."""

    label: str
    value: float
    text: str


@dataclass(frozen=True, slots=True)
class Section:
    """One step of the walk: ``key`` names it for code ("kv", "speed"), the rest for people."""

    key: str
    title: str
    paragraphs: tuple[str, ...]
    numbers: tuple[KeyNumber, ...]


@dataclass(frozen=True, slots=True)
class ExplainFacts:
    """The numbers the explanation and its pictures use (bytes, tokens, seconds).

    ``kv_bytes`` and the other memory totals are the estimate's, summed over devices.
    ``kv_bytes_per_token_full`` / ``..._swa`` are one token's keys and values over all
    full-attention / sliding-window layers. The ``*_alt`` figures are the estimate with one
    setting changed (None when llama.cpp would refuse that setting).
    """

    name: str
    n_params: int
    weights_file_bytes: int
    bits_per_weight: float
    quant: str
    n_layer: int
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    n_head: int
    n_head_kv: int
    n_ctx: int
    n_parallel: int
    n_ubatch: int
    cache_type_k: str
    cache_type_v: str
    weights_bytes: int
    kv_bytes: int
    recurrent_bytes: int
    compute_bytes: int
    other_bytes: int
    total_bytes: int
    n_full_layers: int
    n_swa_layers: int
    n_recurrent_layers: int
    n_swa: int
    swa_cells: int
    kv_bytes_per_token_full: int
    kv_bytes_per_token_swa: int
    kv_bytes_full_cache: int
    kv_bytes_swa_cache: int
    n_expert: int
    n_expert_used: int
    expert_bytes: int
    active_expert_bytes: float
    flash_attn: bool
    compute_bytes_flash_on: int | None
    compute_bytes_flash_off: int | None
    kv_bytes_q8: int | None
    kv_known: bool
    depth: int
    bytes_per_token_read: float
    bandwidth_bytes_per_s: float
    decode_tok_per_s: float | None
    tied_copy_bytes: int = 0
    """The second copy of a shared (tied) token embedding: the output layer's, on the GPU
    named ``tied_copy_device`` (0 when the model has its own output weights, or its output
    layer stays on the CPU): :func:`tied_output_copy`."""
    tied_copy_device: str = ""
    step_nodes: int = 0
    """Compute nodes of one decode step's graph, when a GPU does part of it (0: no GPU)."""
    step_cpu_s: float = 0.0
    """The CPU's time to prepare and launch that step on the GPU (the speed model's
    ``gpu_node_overhead_s`` per node)."""

    @property
    def kv_bytes_per_token(self) -> int:
        """Return one token's keys and values over every attention layer, in bytes."""
        return self.kv_bytes_per_token_full + self.kv_bytes_per_token_swa

    @property
    def bound_tok_per_s(self) -> float:
        """Return the bandwidth bound on writing speed (tokens/s): bandwidth / bytes read."""
        if self.bytes_per_token_read <= 0:
            return 0.0
        return self.bandwidth_bytes_per_s / self.bytes_per_token_read


# --- formatting --------------------------------------------------------------------------


def _size(n: float) -> str:
    """A size as the words give it: GiB, MiB, KiB or bytes, one decimal ("18.0 KiB")."""
    return format_bytes(n, down_to="bytes")


def fmt_count(n: float) -> str:
    """Return a large count in words: "268 million", "7.2 billion", "4,096".

    >>> fmt_count(268_098_176), fmt_count(7_241_732_096), fmt_count(4096)
    ('268 million', '7.2 billion', '4,096')
    """
    if n >= 1e9:
        return f"{n / 1e9:.1f} billion"
    if n >= 1e6:
        return f"{n / 1e6:.0f} million"
    return f"{n:,.0f}"


def fmt_tokens(n: int) -> str:
    """Return a token count with its unit: "32,768 tokens", "1 token"."""
    return f"{n:,} token" + ("" if n == 1 else "s")


def _rate(tok_per_s: float) -> str:
    """Return a speed in tokens/s with the digits that matter (0.12, 3.4, 48)."""
    return f"{format_tps(tok_per_s)} tokens/s"


def _num(label: str, value: float, text: str) -> KeyNumber:
    return KeyNumber(label, value, text)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


# --- the facts ---------------------------------------------------------------------------


def _try_estimate(spec: ModelSpec, settings: Settings, hardware: Hardware) -> MemoryEstimate | None:
    try:
        return estimate(spec, settings, hardware)
    except GGTuneError:
        return None


def _graph_bytes(est: MemoryEstimate | None) -> int | None:
    """Return the compute buffers of every device together, as ``compute_bytes`` (and the
    overview) count them: "now" and "with flash attention" are then one figure when it is
    on (the largest device alone left a GPU's 522.6 MiB beside "now: 564.1 MiB")."""
    if est is None:
        return None
    return sum(d.compute_bytes for d in est.devices)


def tied_output_copy(spec: ModelSpec, settings: Settings, hardware: Hardware) -> tuple[int, str]:
    """Return the bytes and the GPU of the output layer's own copy of a tied token
    embedding, or ``(0, "")`` when there is none.

    A model with tied embeddings (Gemma, Qwen3's small sizes, SmolLM2) has no
    ``output.weight``: its output layer reuses ``token_embd.weight`` (``src/models/gemma3.cpp``,
    ``load_arch_tensors``: ``create_tensor(tn(LLM_TENSOR_TOKEN_EMBD, "weight"), …,
    TENSOR_DUPLICATED)``). The input layer always stays on the CPU (``src/llama-model.cpp``,
    ``load_tensors``: ``dev_input = { cpu_dev, … }``, "very little benefit to offloading
    the input layer") while the output layer goes to a GPU with the first ``-ngl`` layer
    (``dev_output = get_layer_buft_list(n_layer_all)``). A duplicated tensor is only shared
    when it lands in the same buffer type (``src/llama-model-loader.cpp``, ``create_tensor``:
    ``ggml_get_tensor(ctx, …)`` else ``ggml_dup_tensor`` and ``size_data += ggml_nbytes``),
    so with the output layer on a GPU the table is held twice, once in system RAM and once
    on that GPU, as :func:`app.predict.estimate.estimate` counts it.
    """
    if not spec.tied_embeddings:
        return 0, ""
    embd = next((t for t in spec.tensors if t.name == "token_embd.weight"), None)
    if embd is None:
        return 0, ""
    out = place_layers(spec, settings, hardware).output_device
    if out < 0:
        return 0, ""
    return embd.n_bytes, hardware.gpus[out].name


def explain_facts(
    spec: ModelSpec,
    settings: Settings,
    est: MemoryEstimate,
    hardware: Hardware,
    *,
    factors: SpeedFactors | None = None,
) -> ExplainFacts:
    """Return the numbers behind the explanation of ``spec`` run with ``settings``.

    ``est`` must be ``estimate(spec, settings, hardware)``; speed uses ``factors`` (the
    published ratios when None).
    """
    kv_caches = [c for c in est.caches if c.kind != "recurrent"]
    full = next((c for c in kv_caches if c.kind == "kv"), None)
    swa = next((c for c in kv_caches if c.kind == "kv_swa"), None)

    def per_token(cache_bytes: int, cells: int, n_stream: int) -> int:
        return cache_bytes // max(1, cells * n_stream)

    per_full = per_token(full.total_bytes, full.cells, full.n_stream) if full else 0
    # a sparse-attention indexer keeps one more key per token of the full context
    per_full += sum(
        per_token(c.total_bytes, c.cells, c.n_stream) for c in kv_caches if c.kind == "kv_idx"
    )
    per_swa = per_token(swa.total_bytes, swa.cells, swa.n_stream) if swa and swa.n_layers else 0
    n_rec = sum(c.n_layers for c in est.caches if c.kind == "recurrent")

    flash_on = _try_estimate(spec, settings.replace(flash_attn="on"), hardware)
    flash_off = _try_estimate(spec, settings.replace(flash_attn="off"), hardware)
    q8: MemoryEstimate | None = None
    if kv_caches:
        q8_type: CacheType = "q8_0"
        q8 = _try_estimate(
            spec,
            settings.replace(cache_type_k=q8_type, cache_type_v=q8_type, flash_attn="on"),
            hardware,
        )

    depth = speed_depth(settings.n_ctx, settings.n_parallel)
    bytes_read = 0.0
    seconds = 0.0
    expert_bytes = sum(t.n_bytes for t in spec.tensors if t.role == "expert")
    active_experts = 0.0
    decode: float | None = None
    step_nodes = 0
    step_cpu_s = 0.0
    try:
        work = workload(spec, settings, hardware, factors)
        step_cpu_s = gpu_step_cpu_s(work, factors)
        step_nodes = work.n_nodes if step_cpu_s else 0
        for d in work.devices:
            if d.weight_bytes <= 0 and d.kv_bytes_per_depth <= 0:
                continue
            window = min(depth, work.n_swa) if work.n_swa else depth
            b = (
                d.weight_bytes
                + d.kv_bytes_per_depth * depth
                + d.swa_kv_bytes_per_depth * window
                + d.state_bytes
            )
            bytes_read += b
            seconds += b / d.bandwidth_bytes_per_s
            active_experts += d.expert_bytes
        prediction = predict_speed(spec, settings, hardware, depth=depth, factors=factors)
        decode = prediction.decode_tok_per_s
    except GGTuneError:
        pass
    bandwidth = bytes_read / seconds if seconds > 0 else 0.0

    def total(field: str) -> int:
        return sum(int(getattr(d, field)) for d in est.devices)

    full_layers = full.n_layers if full else 0
    tied_bytes, tied_device = tied_output_copy(spec, settings, hardware)
    return ExplainFacts(
        name=spec.name or spec.arch,
        n_params=spec.n_params,
        weights_file_bytes=spec.weights_bytes,
        bits_per_weight=spec.bits_per_weight,
        quant=own_quant_name(spec),
        n_layer=spec.n_layer,
        n_embd=spec.n_embd,
        n_vocab=spec.n_vocab,
        n_ctx_train=spec.n_ctx_train,
        n_head=max(spec.n_head[: spec.n_layer], default=0),
        n_head_kv=max(spec.n_head_kv[: spec.n_layer], default=0),
        n_ctx=est.context.n_ctx,
        n_parallel=settings.n_parallel,
        n_ubatch=est.context.n_ubatch,
        cache_type_k=settings.cache_type_k,
        cache_type_v=settings.cache_type_v,
        weights_bytes=total("weights_bytes"),
        kv_bytes=total("kv_bytes"),
        recurrent_bytes=total("recurrent_bytes"),
        compute_bytes=total("compute_bytes"),
        other_bytes=total("other_bytes") + total("output_bytes"),
        total_bytes=est.total_bytes,
        n_full_layers=full_layers,
        n_swa_layers=swa.n_layers if swa else 0,
        n_recurrent_layers=n_rec,
        n_swa=spec.n_swa if swa and swa.n_layers else 0,
        swa_cells=swa.cells if swa else 0,
        kv_bytes_per_token_full=per_full,
        kv_bytes_per_token_swa=per_swa,
        kv_bytes_full_cache=full.total_bytes if full else 0,
        kv_bytes_swa_cache=swa.total_bytes if swa else 0,
        n_expert=spec.n_expert,
        n_expert_used=spec.n_expert_used,
        expert_bytes=expert_bytes,
        active_expert_bytes=active_experts,
        flash_attn=est.context.flash_attn,
        compute_bytes_flash_on=_graph_bytes(flash_on),
        compute_bytes_flash_off=_graph_bytes(flash_off),
        kv_bytes_q8=None if q8 is None else sum(d.kv_bytes for d in q8.devices),
        kv_known=est.kv_rule_known,
        depth=depth,
        bytes_per_token_read=bytes_read,
        bandwidth_bytes_per_s=bandwidth,
        decode_tok_per_s=decode,
        tied_copy_bytes=tied_bytes,
        tied_copy_device=tied_device,
        step_nodes=step_nodes,
        step_cpu_s=step_cpu_s,
    )


# --- the sections ------------------------------------------------------------------------


def _overview(f: ExplainFacts) -> Section:
    twice = (
        f" ({_size(f.tied_copy_bytes)} of it a second copy of the token table, on the GPU: "
        "step 3 says why)"
        if f.tied_copy_bytes
        else ""
    )
    parts = [
        f"weights {_size(f.weights_bytes)}{twice}",
        f"KV cache {_size(f.kv_bytes)}",
    ]
    if f.recurrent_bytes:
        parts.append(f"recurrent state {_size(f.recurrent_bytes)}")
    parts.append(f"compute scratch space {_size(f.compute_bytes)}")
    if f.other_bytes:
        parts.append(f"other buffers {_size(f.other_bytes)}")
    return Section(
        "overview",
        "Where the memory goes",
        (
            f"Running {f.name} with these settings takes {_size(f.total_bytes)} in all: "
            + ", ".join(parts)
            + ".",
            "The weights are the model itself and never change size while it runs. The KV "
            "cache is the model's memory of the conversation and grows with the context you "
            "ask for. The compute space is scratch paper for the arithmetic. The steps below "
            "explain each one.",
        ),
        (
            _num("Total", f.total_bytes, _size(f.total_bytes)),
            _num("Weights", f.weights_bytes, _size(f.weights_bytes)),
            _num("KV cache", f.kv_bytes, _size(f.kv_bytes)),
            _num("Compute", f.compute_bytes, _size(f.compute_bytes)),
        ),
    )


def _tokens(f: ExplainFacts) -> Section:
    return Section(
        "tokens",
        "Your prompt becomes tokens",
        (
            "The model does not read letters or whole words. Your text is first cut into "
            "tokens: common words are one token, rarer words are split into a few pieces. "
            f"This model knows {fmt_count(f.n_vocab)} different tokens (its vocabulary).",
            "It reads the whole prompt in one go (reading, or prefill), then writes the "
            "answer one token at a time (writing, or decode): each new token is added to "
            "the text and the model runs again to pick the next one. A page of English is "
            "roughly 500–700 tokens.",
            f"You asked for room for {fmt_tokens(f.n_ctx)} (the context: prompt and answer "
            f"together{', shared by ' + str(f.n_parallel) + ' users' if f.n_parallel > 1 else ''}"
            f"). The model was trained on texts up to {fmt_tokens(f.n_ctx_train)}.",
        ),
        (
            _num("Vocabulary", f.n_vocab, fmt_tokens(f.n_vocab)),
            _num("Context", f.n_ctx, fmt_tokens(f.n_ctx)),
            _num("Training context", f.n_ctx_train, fmt_tokens(f.n_ctx_train)),
        ),
    )


def _layers(f: ExplainFacts) -> Section:
    return Section(
        "layers",
        "Each token passes through a stack of layers",
        (
            f"Inside, each token is a list of {f.n_embd:,} numbers (its width). That list "
            f"goes through {_plural(f.n_layer, 'layer')}, one after the other; each layer "
            "adjusts the numbers a little, and after the last one the model scores every "
            "word in its vocabulary and picks the next token.",
            "Every layer has two parts: attention, which looks back at the earlier tokens "
            "to see what matters for this one, and a feed-forward part, which works on the "
            "token by itself (most of the model's knowledge is stored there).",
        ),
        (
            _num("Layers", f.n_layer, _plural(f.n_layer, "layer")),
            _num("Width", f.n_embd, f"{f.n_embd:,} numbers per token"),
        ),
    )


def _quant_paragraph(f: ExplainFacts, fp16: int) -> str:
    if f.bits_per_weight >= 15.5:  # F16/BF16/F32: nothing rounded away yet
        q4 = f.n_params * 4.9 / 8  # Q4_K_M's typical bits per weight (docs/sources.md §4)
        return (
            f"This file keeps its weights at {f.bits_per_weight:.0f} bits ({f.quant}), as in "
            f"training: {_size(f.weights_file_bytes)}. Quantizing it rounds each weight "
            f"to fewer bits, like saving a photo as a JPEG: at about 4.9 bits (Q4_K_M) it "
            f"would be about {_size(round(q4))}, slightly less exact. Fewer bits mean "
            "less memory and faster writing (less to read per token), at some cost in quality."
        )
    return (
        f"This file is quantized as {f.quant}: each weight is rounded to about "
        f"{f.bits_per_weight:.1f} bits on average instead of the 16 bits used in "
        f"training. That makes the file {_size(f.weights_file_bytes)} instead of "
        f"about {_size(fp16)}, like saving a photo as a smaller JPEG: much smaller, "
        "slightly less exact. Fewer bits mean less memory and faster writing (less to "
        "read per token), at some cost in quality."
    )


def _tied_paragraph(f: ExplainFacts) -> str:
    """Why the weights in memory are more than the file's: the tied embedding, twice."""
    gpu = f"the GPU ({f.tied_copy_device})" if f.tied_copy_device else "the GPU"
    extra = f.weights_bytes - f.weights_file_bytes
    lead = (
        f"The weights take {_size(f.weights_bytes)} in memory, {_size(extra)} more than "
        f"their own {_size(f.weights_file_bytes)}, because one table is loaded twice. "
        if extra > 0
        else "One table of the weights is loaded twice. "
    )
    return (
        lead + "This model uses the same table of token vectors (its token embedding, "
        f"{_size(f.tied_copy_bytes)}) on the way in, to turn each token into numbers, and "
        "on the way out, to score every word of its vocabulary. llama.cpp always keeps the "
        "way in on the CPU, in system RAM, and the way out belongs to the output layer, "
        f"which runs on {gpu}; so the GPU gets its own copy of the table."
    )


def _weights(f: ExplainFacts) -> Section:
    fp16 = 2 * f.n_params
    paragraphs = [
        f"What the model learned is stored as {fmt_count(f.n_params)} numbers called "
        "weights (or parameters). Every token needs all of them, so they must sit in "
        "memory the whole time.",
        _quant_paragraph(f, fp16),
    ]
    numbers = [
        _num("Parameters", f.n_params, f"{fmt_count(f.n_params)} weights"),
        _num("Bits per weight", f.bits_per_weight, f"{f.bits_per_weight:.2f} bits"),
        _num("Weights in memory", f.weights_bytes, _size(f.weights_bytes)),
        _num("At 16 bits", fp16, _size(fp16)),
    ]
    if f.tied_copy_bytes:
        paragraphs.append(_tied_paragraph(f))
        numbers.insert(3, _num("Held twice", f.tied_copy_bytes, _size(f.tied_copy_bytes)))
    return Section(
        "weights",
        "The weights, and why quantization shrinks them",
        tuple(paragraphs),
        tuple(numbers),
    )


def _kv(f: ExplainFacts) -> Section | None:
    if not f.kv_known:
        return Section(
            "kv",
            "Attention and the KV cache",
            (
                "ggtune does not know how this architecture keeps its memory of the "
                "conversation, so the KV cache is not counted here.",
            ),
            (),
        )
    if not f.n_full_layers and not f.n_swa_layers:
        return None
    bits = _CACHE_BITS.get(f.cache_type_k, f.cache_type_k)
    same = f.cache_type_k == f.cache_type_v
    kind = (
        f"{f.cache_type_k} ({bits} numbers)"
        if same
        else f"{f.cache_type_k} for keys and {f.cache_type_v} for values"
    )
    gqa = ""
    if f.n_head_kv and f.n_head > f.n_head_kv:
        gqa = (
            f" Its {f.n_head} attention heads (parallel ways of looking back) share "
            f"{f.n_head_kv} set{'s' if f.n_head_kv > 1 else ''} of keys and values, which "
            f"makes the cache {f.n_head // f.n_head_kv}× smaller than it could be."
        )
    paragraphs = [
        "To write a token, attention compares it with every earlier token. Redoing that "
        "work for the whole text at each step would be slow, so every layer keeps two short "
        "notes per token it has seen: a key (what the token is about) and a value (what it "
        "contributes). That store is the KV cache, and it grows by one entry per layer with "
        "every token, in the prompt and in the answer." + gqa,
    ]
    if f.n_swa_layers and f.n_swa and f.n_full_layers:
        # only the full-attention layers keep every token: a per-token cost over all the
        # layers times the context (Gemma 3 27B: 496 KiB × 16k = 7.75 GiB) is no cache
        # llama.cpp reserves; the model card counts the growing layers alike
        paragraphs.append(
            f"For this model one token costs {_size(f.kv_bytes_per_token_full)} of cache in "
            f"its {_plural(f.n_full_layers, 'full-attention layer')}, which keep every "
            f"token, stored as {kind}; its {f.n_swa_layers} sliding-window layers keep only "
            f"the last {fmt_tokens(f.n_swa)} (step 5). llama.cpp reserves the cache for the "
            f"whole context up front: {fmt_tokens(f.n_ctx)} → {_size(f.kv_bytes)}, used "
            "even while the conversation is still short. Doubling the context roughly "
            f"doubles the full-attention part ({_size(f.kv_bytes_full_cache)} now)."
        )
        per_token = _num(
            "KV per token (full-attention layers)",
            f.kv_bytes_per_token_full,
            _size(f.kv_bytes_per_token_full),
        )
    else:
        paragraphs.append(
            f"For this model one token costs {_size(f.kv_bytes_per_token)} of cache over "
            f"all its attention layers, stored as {kind}. llama.cpp reserves the cache for "
            f"the whole context up front: {fmt_tokens(f.n_ctx)} → {_size(f.kv_bytes)}, used "
            "even while the conversation is still short. Doubling the context roughly "
            "doubles this part."
        )
        per_token = _num("KV per token", f.kv_bytes_per_token, _size(f.kv_bytes_per_token))
    numbers = [per_token, _num("KV cache at this context", f.kv_bytes, _size(f.kv_bytes))]
    if f.kv_bytes_q8 is not None and f.kv_bytes_q8 != f.kv_bytes:
        paragraphs.append(
            "The cache can be quantized too: with 8-bit numbers (q8_0) instead of "
            f"{bits} it would take {_size(f.kv_bytes_q8)}, with a very small effect on "
            "quality. llama.cpp needs flash attention (below) for a quantized value cache."
        )
        numbers.append(_num("KV cache at q8_0", f.kv_bytes_q8, _size(f.kv_bytes_q8)))
    return Section("kv", "Attention and the KV cache", tuple(paragraphs), tuple(numbers))


def _window(f: ExplainFacts) -> Section | None:
    if not f.n_swa_layers or not f.n_swa:
        return None
    if_full = f.kv_bytes_per_token_swa * f.n_ctx
    return Section(
        "window",
        "Sliding-window layers only look back so far",
        (
            f"{f.n_swa_layers} of the {f.n_layer} layers use a sliding window: they only "
            f"look at the last {fmt_tokens(f.n_swa)}. They can forget older tokens, so "
            f"their cache holds just {fmt_tokens(f.swa_cells)} (the window for each user, "
            f"plus room for one batch of new tokens): {_size(f.kv_bytes_swa_cache)}.",
            f"The other {_plural(f.n_full_layers, 'layer')} see the whole text and keep "
            f"every token: {_size(f.kv_bytes_full_cache)} at this context. Without the "
            f"window the sliding layers alone would need about {_size(if_full)}.",
        ),
        (
            _num("Window", f.n_swa, fmt_tokens(f.n_swa)),
            _num("Sliding-window layers", f.n_swa_layers, _plural(f.n_swa_layers, "layer")),
            _num(
                "Their cache",
                f.kv_bytes_swa_cache,
                _size(f.kv_bytes_swa_cache),
            ),
            _num(
                "Full-attention cache",
                f.kv_bytes_full_cache,
                _size(f.kv_bytes_full_cache),
            ),
        ),
    )


def _experts(f: ExplainFacts) -> Section | None:
    if not f.n_expert:
        return None
    return Section(
        "experts",
        "Mixture of experts: only a few parts work per token",
        (
            f"This model's feed-forward parts are split into {f.n_expert} experts per "
            f"layer, and a small router picks {f.n_expert_used} of them for each token. All "
            f"experts ({_size(f.expert_bytes)}) must be in memory, but a token only "
            f"reads about {_size(f.active_expert_bytes)} of them, so it writes much "
            "faster than a model of the same size where every weight works on every token.",
        ),
        (
            _num("Experts per layer", f.n_expert, f"{f.n_expert} experts"),
            _num("Active per token", f.n_expert_used, f"{f.n_expert_used} experts"),
            _num("All experts", f.expert_bytes, _size(f.expert_bytes)),
        ),
    )


def _recurrent(f: ExplainFacts) -> Section | None:
    if not f.n_recurrent_layers:
        return None
    return Section(
        "recurrent",
        "Recurrent layers keep a summary instead of every token",
        (
            f"{f.n_recurrent_layers} of the layers are recurrent: instead of a note per "
            "token they carry one fixed-size summary of everything read so far, updated at "
            f"each token. It takes {_size(f.recurrent_bytes)} here and does not grow "
            "with the context.",
        ),
        (
            _num("Recurrent layers", f.n_recurrent_layers, _plural(f.n_recurrent_layers, "layer")),
            _num(
                "Recurrent state",
                f.recurrent_bytes,
                _size(f.recurrent_bytes),
            ),
        ),
    )


def _flash(f: ExplainFacts) -> Section:
    state = "on" if f.flash_attn else "off"
    paragraphs = [
        "While reading the prompt the model works on a batch of tokens at once and needs "
        "scratch space (the compute buffer). Plain attention writes out a whole table of "
        "scores, every token of the batch against every token in the cache, for all heads "
        "at once. Flash attention works through that table in small tiles and never stores "
        "it whole, so the scratch space stops growing with the context.",
    ]
    numbers = [_num("Compute buffer now", f.compute_bytes, _size(f.compute_bytes))]
    logits = 4 * f.n_vocab * f.n_ubatch
    on, off = f.compute_bytes_flash_on, f.compute_bytes_flash_off
    if on is not None and off is not None:
        paragraphs.append(
            f"Flash attention is {state} with these settings. For this model at "
            f"{fmt_tokens(f.n_ctx)} the compute buffers take {_size(on)} with it and "
            f"{_size(off)} without it."
        )
        if 2 * logits > on and abs(off - on) * 10 < on:
            paragraphs.append(
                f"The two are close here because most of the space holds something else: "
                f"a score for each of the {fmt_count(f.n_vocab)} vocabulary tokens, for each "
                f"of the {fmt_tokens(f.n_ubatch)} read at once (4 bytes each): "
                f"{_size(logits)}."
            )
        numbers += [
            _num("With flash attention", on, _size(on)),
            _num("Without flash attention", off, _size(off)),
        ]
    elif on is not None:
        paragraphs.append(
            f"Flash attention is {state}; with it the compute buffer is {_size(on)}. "
            "These settings cannot run without it (a quantized value cache needs it)."
        )
        numbers.append(_num("With flash attention", on, _size(on)))
    return Section(
        "flash", "Flash attention and the scratch space", tuple(paragraphs), tuple(numbers)
    )


def _speed(f: ExplainFacts) -> Section | None:
    if f.bytes_per_token_read <= 0 or f.bandwidth_bytes_per_s <= 0:
        return None
    gbs = f.bandwidth_bytes_per_s / 1e9
    paragraphs = [
        "Writing is limited by memory speed, not by arithmetic: for every new token the "
        "processor must read all the weights it uses, plus the KV cache of the earlier "
        "tokens. So the best possible speed is the memory's bandwidth (bytes it delivers "
        "per second) divided by the bytes read per token.",
        f"Here, {fmt_tokens(f.depth)} into a conversation, each token reads about "
        f"{_size(f.bytes_per_token_read)}. This memory really delivers about "
        f"{gbs:.0f} GB/s, which allows at most "
        f"{_rate(f.bound_tok_per_s)}.",
    ]
    numbers = [
        _num(
            "Read per token",
            f.bytes_per_token_read,
            _size(f.bytes_per_token_read),
        ),
        _num("Bandwidth", f.bandwidth_bytes_per_s, f"{gbs:.0f} GB/s"),
        _num("Speed bound", f.bound_tok_per_s, _rate(f.bound_tok_per_s)),
    ]
    if f.decode_tok_per_s is not None:
        paragraphs.append(
            f"ggtune predicts about {_rate(f.decode_tok_per_s)} (everything counted). "
            "This is why quantization speeds writing up: fewer bits per weight, fewer bytes "
            "to read per token."
        )
        numbers.append(
            _num("Predicted writing speed", f.decode_tok_per_s, _rate(f.decode_tok_per_s))
        )
        share = f.step_cpu_s * f.decode_tok_per_s  # of each token's time
        if f.step_nodes and share >= 0.2:
            paragraphs.append(
                f"A small model is held back by something else: before the GPU runs a step "
                f"the CPU prepares and launches it, {f.step_nodes:,} operations, about "
                f"{f.step_cpu_s * 1000:.2f} ms, set by the number of layers, not by the "
                f"weights' size (llama.cpp measured this at 10–15 % of a 7B model's token). "
                f"Here that is {share * 100:.0f} % of each token, so the speed stays well "
                f"below the memory's bound."
            )
            numbers.append(_num("CPU per step", f.step_cpu_s, f"{f.step_cpu_s * 1000:.2f} ms"))
    return Section(
        "speed", "Why memory speed sets the writing speed", tuple(paragraphs), tuple(numbers)
    )


def sections_from_facts(f: ExplainFacts) -> tuple[Section, ...]:
    """Return the walk for already gathered ``f`` (sections that do not apply are left out)."""
    parts = (
        _overview(f),
        _tokens(f),
        _layers(f),
        _weights(f),
        _kv(f),
        _window(f),
        _experts(f),
        _recurrent(f),
        _flash(f),
        _speed(f),
    )
    kept = [s for s in parts if s is not None]
    # number the steps of the walk after the overview
    steps = (dataclasses.replace(s, title=f"{i}. {s.title}") for i, s in enumerate(kept[1:], 1))
    return (kept[0], *steps)


def explain_model(
    spec: ModelSpec,
    settings: Settings,
    est: MemoryEstimate,
    hardware: Hardware,
    *,
    factors: SpeedFactors | None = None,
) -> tuple[Section, ...]:
    """Return the walk from prompt to answer for ``spec``, with the estimate's numbers.

    ``est`` must be ``estimate(spec, settings, hardware)``.
    """
    return sections_from_facts(explain_facts(spec, settings, est, hardware, factors=factors))
