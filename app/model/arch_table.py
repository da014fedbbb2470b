"""Every architecture the pinned llama.cpp names, and how it keeps per-sequence memory.

One :class:`ArchRule` per name of ``LLM_ARCH_NAMES`` (``src/llama-arch.cpp``), read from the
vendored source (commit in docs/engine.md):

* the memory module ``llama_model::create_memory`` builds (``src/llama-model.cpp``) and the
  layer filters it passes, with ``llm_arch_is_recurrent`` / ``llm_arch_is_hybrid``
  (``src/llama-arch.cpp``);
* which layers use the sliding window and how wide it is, from the architecture's
  ``load_arch_hparams`` (``src/models/<arch>.cpp``) and ``llama_hparams::set_swa_pattern``
  / ``llama_model_base::load_swa_pattern``;
* which layers are recurrent (``is_recr_impl``) for recurrent and hybrid models;
* whether the KV cache is MLA (K only: the arch reads ``attention.key_length_mla`` and
  ``attention.value_length_mla``, ``llama_hparams::is_mla``).

A test (tests/app/test_arch_table.py) reads ``LLM_ARCH_NAMES`` from the vendored llama.cpp
and fails for a name missing here, so a pin bump lists what is new.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

Family = Literal[
    "kv",
    "iswa",
    "recurrent",
    "hybrid",
    "dsa",
    "dsa_iswa",
    "msa",
    "hybrid_idx",
    "dsv4",
    "enc_dec",
    "none",
    "draft",
    "not_a_model",
]
"""The memory module ``create_memory`` builds (before metadata-dependent choices):

``kv``          one ``llama_kv_cache`` (``iswa`` instead when the arch's SWA rule enables a window)
``iswa``        ``llama_kv_cache_iswa``: a full cache and a sliding-window cache
``recurrent``   ``llama_memory_recurrent`` (Mamba, RWKV)
``hybrid``      ``llama_memory_hybrid`` (KV on attention layers + recurrent state), or
                ``llama_memory_hybrid_iswa`` when the model has a sliding window
``dsa``         ``llama_kv_cache_dsa``: K-only MLA cache + the lightning indexer's key cache
``dsa_iswa``    ``llama_kv_cache_dsa_iswa``: a DSA cache for full layers + an SWA cache
``msa``         ``llama_kv_cache_msa``: the main cache + an indexer K/V cache
``hybrid_idx``  ``llama_memory_hybrid_idx``: hybrid + an indexer key cache
``dsv4``        ``llama_kv_cache_dsv4``: raw SWA cache, compressed caches and compressor state
``enc_dec``     T5: the decoder's KV cache (one layer per encoder block)
``none``        no memory (``create_memory`` returns nullptr: embeddings, diffusion)
``draft``       a speculative head that shares or needs the target model's context
``not_a_model`` a name llama.cpp cannot load as a model (quantizer stub, unknown)
"""

SwaEnable = Literal["always", "key", "key_not_zero", "n_layer_64", "hc_or_key"]
"""When the sliding window is on: always; ``key`` = ``attention.sliding_window`` present and
> 0; ``key_not_zero`` = unless the key is present and 0 (llama4); ``n_layer_64`` = only for
64 trunk layers (exaone4 32B); ``hc_or_key`` = dflash (all layers with hyper-connections,
else the key)."""


@dataclass(frozen=True, slots=True)
class SwaRule:
    """Which layers use the sliding window (``load_arch_hparams``).

    ``pattern`` is ``load_swa_pattern(ml, n, dense_first)``: a ``sliding_window_pattern``
    array is copied as given, an integer key replaces ``n``; ``array`` requires the array;
    ``all`` puts every layer on the window; ``non_recurrent`` is lfm2's (attention layers).
    ``default_n_swa`` is the window before the key is read (the key overrides it);
    ``forced_n_swa`` replaces whatever the key said (llama4 8192, smallthinker 4096).
    """

    layers: Literal["pattern", "array", "all", "non_recurrent"]
    enable: SwaEnable = "always"
    n_pattern: int = 0
    dense_first: bool = False
    default_n_swa: int = 0
    forced_n_swa: int = 0
    chunked: bool = False


RecurrentLayers = Literal["all", "kv0", "kv0_all", "kv0_ff0", "interval4", "interval8"]
"""Which layers are recurrent (``is_recr_impl``): ``all`` trunk layers; ``kv0`` trunk layers
with ``head_count_kv`` 0; ``kv0_all`` any layer with 0 KV heads (glm5-next); ``kv0_ff0``
0 KV heads and no FFN (nemotron_h); ``intervalN`` all but every N-th layer
(``full_attention_interval``, default N) unless ``attention.recurrent_layers`` lists them."""

AttnFilter = Literal["not_recurrent", "all", "trunk_not_recurrent", "not_recurrent_ff0"]
"""Hybrid attention-layer filter in ``create_memory``: default ``!is_recr(il)`` over every
layer; falcon-h1 every layer; qwen3next/qwen35/qwen4exp/minimax-01 trunk layers that are
not recurrent; nemotron_h ``!is_recr(il) && n_ff(il) == 0``."""


@dataclass(frozen=True, slots=True)
class ArchRule:
    """How one architecture's memory is built; ``source`` names the file the rule is from."""

    family: Family
    source: str
    swa: SwaRule | None = None
    recurrent: RecurrentLayers | None = None
    attn_filter: AttnFilter = "not_recurrent"
    mla: bool = False
    note: str = ""


def _kv(source: str, note: str = "", *, mla: bool = False) -> ArchRule:
    return ArchRule("kv", source, mla=mla, note=note)


def _swa(source: str, rule: SwaRule, note: str = "") -> ArchRule:
    return ArchRule("kv", source, swa=rule, note=note)


def _hybrid(
    source: str,
    recurrent: RecurrentLayers,
    attn: AttnFilter = "not_recurrent",
    *,
    mla: bool = False,
    swa: SwaRule | None = None,
    note: str = "",
) -> ArchRule:
    return ArchRule(
        "hybrid", source, swa=swa, recurrent=recurrent, attn_filter=attn, mla=mla, note=note
    )


def _none(source: str, note: str) -> ArchRule:
    return ArchRule("none", source, note=note)


_M = "src/models/"
_P4 = SwaRule("pattern", n_pattern=4)

ARCH_RULES: Final[dict[str, ArchRule]] = {
    # --- not models ---------------------------------------------------------------------
    "clip": ArchRule("not_a_model", _M + "clip.cpp", note="quantizer-only stub (mmproj files)"),
    "(unknown)": ArchRule("not_a_model", "src/llama-arch.cpp", note="LLM_ARCH_UNKNOWN"),
    "gptj": ArchRule(
        "not_a_model",
        "src/llama-model.cpp",
        note="no model class: 'unsupported model architecture'",
    ),
    # --- no memory (create_memory returns nullptr) -------------------------------------
    "bert": _none(_M + "bert.cpp", "embedding model"),
    "jina-bert-v2": _none(_M + "jina-bert-v2.cpp", "embedding model"),
    "jina-bert-v3": _none(_M + "jina-bert-v3.cpp", "embedding model"),
    "nomic-bert": _none(_M + "nomic-bert.cpp", "embedding model"),
    "nomic-bert-moe": _none(_M + "nomic-bert-moe.cpp", "embedding model"),
    "neo-bert": _none(_M + "neo-bert.cpp", "embedding model"),
    "eurobert": _none(_M + "eurobert.cpp", "embedding model"),
    "modern-bert": _none(_M + "modern-bert.cpp", "embedding model (symmetric SWA, no cache)"),
    "gemma-embedding": _none(
        _M + "gemma-embedding.cpp", "embedding model (symmetric SWA, no cache)"
    ),
    "wavtokenizer-dec": _none(_M + "wavtokenizer-dec.cpp", "audio decoder"),
    "dream": _none(_M + "dream.cpp", "diffusion LM (non-causal)"),
    "llada": _none(_M + "llada.cpp", "diffusion LM (non-causal)"),
    "llada-moe": _none(_M + "llada-moe.cpp", "diffusion LM (non-causal)"),
    "rnd1": _none(_M + "rnd1.cpp", "diffusion LM (non-causal)"),
    # --- recurrent (llm_arch_is_recurrent) ----------------------------------------------
    "mamba": ArchRule("recurrent", _M + "mamba.cpp", recurrent="all"),
    "mamba2": ArchRule("recurrent", _M + "mamba2.cpp", recurrent="all"),
    "rwkv6": ArchRule("recurrent", _M + "rwkv6.cpp", recurrent="all"),
    "rwkv6qwen2": ArchRule("recurrent", _M + "rwkv6qwen2.cpp", recurrent="all"),
    "rwkv7": ArchRule("recurrent", _M + "rwkv7.cpp", recurrent="all"),
    "arwkv7": ArchRule("recurrent", _M + "arwkv7.cpp", recurrent="all"),
    # --- hybrid (llm_arch_is_hybrid) ------------------------------------------------------
    "jamba": _hybrid(_M + "jamba.cpp", "kv0", note="Mamba-1 + attention"),
    "falcon-h1": _hybrid(_M + "falcon-h1.cpp", "all", "all", note="every layer has both"),
    "plamo2": _hybrid(_M + "plamo2.cpp", "kv0", note="Mamba-2 + attention"),
    "granitehybrid": _hybrid(_M + "granite-hybrid.cpp", "kv0", note="Mamba-2 + attention"),
    "lfm2": _hybrid(
        _M + "lfm2.cpp",
        "kv0",
        swa=SwaRule("non_recurrent", enable="key"),
        note="short convolutions + attention; hybrid iSWA with a sliding_window key",
    ),
    "lfm2moe": _hybrid(_M + "lfm2moe.cpp", "kv0", note="short convolutions + attention, MoE"),
    "nemotron_h": _hybrid(_M + "nemotron-h.cpp", "kv0_ff0", "not_recurrent_ff0"),
    "nemotron_h_moe": _hybrid(_M + "nemotron-h.cpp", "kv0_ff0", "not_recurrent_ff0"),
    "qwen3next": _hybrid(_M + "qwen3next.cpp", "interval4", "trunk_not_recurrent"),
    "qwen35": _hybrid(
        _M + "qwen35.cpp", "interval4", "trunk_not_recurrent", note="gated delta net"
    ),
    "qwen35moe": _hybrid(_M + "qwen35moe.cpp", "interval4", "trunk_not_recurrent"),
    "minimax-01": _hybrid(
        _M + "minimax-01.cpp", "interval8", "trunk_not_recurrent", note="lightning attention"
    ),
    "kimi-linear": _hybrid(_M + "kimi-linear.cpp", "kv0", mla=True, note="KDA + MLA"),
    "kimi-k3": _hybrid(_M + "kimi-k3.cpp", "kv0", mla=True, note="KDA + MLA"),
    "bailingmoe3": _hybrid(_M + "bailingmoe3.cpp", "kv0", mla=True, note="KDA + MLA"),
    "qwen4exp": ArchRule(
        "hybrid_idx",
        _M + "qwen4exp.cpp",
        recurrent="interval4",
        attn_filter="trunk_not_recurrent",
        note="delta net + QSA indexer cache + PLE conv state",
    ),
    "glm5-next": ArchRule(
        "hybrid_idx",
        _M + "glm5-next.cpp",
        recurrent="kv0_all",
        attn_filter="trunk_not_recurrent",
        mla=True,
        note="KDA + DSA (MLA + pooled indexer keys)",
    ),
    "deepseek4": ArchRule(
        "dsv4",
        _M + "deepseek4.cpp",
        swa=SwaRule("all"),
        note="raw SWA cache, CSA/HCA compressed caches, compressor states (kv-cache-dsv4)",
    ),
    # --- sparse attention ---------------------------------------------------------------
    "deepseek32": ArchRule("dsa", _M + "deepseek32.cpp", mla=True),
    "glm-dsa": ArchRule(
        "dsa", _M + "glm-dsa.cpp", mla=True, note="indexer on is_indexer_full layers"
    ),
    "hy_v4": ArchRule(
        "dsa", _M + "hy-v4.cpp", mla=True, note="plain MLA cache when indexer.top_k is 0"
    ),
    "dots3note": ArchRule("dsa_iswa", _M + "dots3note.cpp", swa=SwaRule("array"), mla=True),
    "minimax-m3": ArchRule("msa", _M + "minimax-m3.cpp", note="indexer cache past the dense lead"),
    # --- encoder-decoder ------------------------------------------------------------------
    "t5": ArchRule("enc_dec", _M + "t5.cpp", note="decoder KV has block_count layers"),
    "t5encoder": _kv(
        _M + "t5encoder.cpp", "encoder only, but create_memory still builds a KV cache"
    ),
    # --- drafts -----------------------------------------------------------------------------
    "gemma4-assistant": ArchRule(
        "draft", _M + "gemma4-assistant.cpp", swa=SwaRule("array"), note="shares the target's KV"
    ),
    "eagle3": ArchRule("draft", _M + "eagle3.cpp", note="EAGLE-3 head, reads target hidden states"),
    "dflash": ArchRule(
        "draft",
        _M + "dflash.cpp",
        swa=SwaRule("array", enable="hc_or_key"),
        note="DFlash/DSpark draft; all-SWA with hyper-connections",
    ),
    # --- iSWA (sliding window) ---------------------------------------------------------
    "gemma2": _swa(_M + "gemma2.cpp", SwaRule("pattern", n_pattern=2, default_n_swa=4096)),
    "gemma3": _swa(_M + "gemma3.cpp", SwaRule("pattern", enable="key", n_pattern=6)),
    "gemma3n": _swa(
        _M + "gemma3n.cpp",
        SwaRule("pattern", n_pattern=5),
        "layers from 20 on reuse the KV of layer 18 (SWA) / 19 (full)",
    ),
    "gemma4": _swa(
        _M + "gemma4.cpp",
        SwaRule("array"),
        "the last shared_kv_layers layers reuse the KV of the last SWA / full layer before them",
    ),
    "cohere2": _swa(_M + "cohere2.cpp", _P4),
    "cohere2moe": _swa(_M + "cohere2moe.cpp", SwaRule("pattern", n_pattern=4, dense_first=True)),
    "gpt-oss": _swa(_M + "openai-moe.cpp", SwaRule("pattern", n_pattern=2)),
    "olmo2": _swa(_M + "olmo2.cpp", SwaRule("pattern", enable="key", n_pattern=4)),
    "exaone4": _swa(
        _M + "exaone4.cpp", SwaRule("pattern", enable="n_layer_64", n_pattern=4, default_n_swa=4096)
    ),
    "exaone-moe": _swa(_M + "exaone-moe.cpp", SwaRule("pattern", n_pattern=4, default_n_swa=128)),
    "afmoe": _swa(_M + "afmoe.cpp", SwaRule("pattern", enable="key", n_pattern=4)),
    "mellum": _swa(_M + "mellum.cpp", SwaRule("pattern", enable="key", n_pattern=4)),
    "muse-glimmer": _swa(_M + "muse-glimmer.cpp", _P4),
    "plamo3": _swa(_M + "plamo3.cpp", SwaRule("pattern", enable="key", n_pattern=8)),
    "smallthinker": _swa(
        _M + "smallthinker.cpp",
        SwaRule("pattern", enable="key", n_pattern=4, dense_first=True, forced_n_swa=4096),
    ),
    "laguna": _swa(
        _M + "laguna.cpp", SwaRule("pattern", enable="key", n_pattern=4, dense_first=True)
    ),
    "llama4": _swa(
        _M + "llama4.cpp",
        SwaRule("pattern", enable="key_not_zero", n_pattern=4, forced_n_swa=8192, chunked=True),
        "chunked attention (3 chunked : 1 full), window fixed at 8192",
    ),
    "granite_swa": _swa(_M + "granite-swa.cpp", SwaRule("array")),
    "maple": _swa(_M + "maple.cpp", SwaRule("array")),
    "mimo2": _swa(_M + "mimo2.cpp", SwaRule("array")),
    "spark2_5": _swa(_M + "spark2-5.cpp", SwaRule("array")),
    "step35": _swa(_M + "step35.cpp", SwaRule("array")),
    # --- MLA on a plain cache ---------------------------------------------------------
    "deepseek2": _kv(_M + "deepseek2.cpp", mla=True),
    "mistral4": _kv(_M + "deepseek2.cpp", "DeepSeek-V2 layout", mla=True),
    # --- one plain KV cache ---------------------------------------------------------------
    **{
        name: _kv(_M + file)
        for name, file in {
            "llama": "llama.cpp",
            "llama-embed": "llama.cpp",
            "maincoder": "maincoder.cpp",
            "talkie": "talkie.cpp",
            "deci": "deci.cpp",
            "falcon": "falcon.cpp",
            "grok": "grok.cpp",
            "gpt2": "gpt2.cpp",
            "gptneox": "gptneox.cpp",
            "mpt": "mpt.cpp",
            "baichuan": "baichuan.cpp",
            "starcoder": "starcoder.cpp",
            "refact": "refact.cpp",
            "bloom": "bloom.cpp",
            "stablelm": "stablelm.cpp",
            "qwen": "qwen.cpp",
            "qwen2": "qwen2.cpp",
            "qwen2moe": "qwen2moe.cpp",
            "qwen2vl": "qwen2vl.cpp",
            "qwen3": "qwen3.cpp",
            "qwen3moe": "qwen3moe.cpp",
            "qwen3vl": "qwen3vl.cpp",
            "qwen3vlmoe": "qwen3vlmoe.cpp",
            "qwen3tts": "qwen3vl.cpp",
            "pockettts": "pockettts.cpp",
            "phi2": "phi2.cpp",
            "phi3": "phi3.cpp",
            "phimoe": "phimoe.cpp",
            "plamo": "plamo.cpp",
            "codeshell": "codeshell.cpp",
            "orion": "orion.cpp",
            "internlm2": "internlm2.cpp",
            "minicpm": "minicpm.cpp",
            "minicpm3": "minicpm3.cpp",
            "gemma": "gemma.cpp",
            "starcoder2": "starcoder2.cpp",
            "xverse": "xverse.cpp",
            "command-r": "command-r.cpp",
            "dbrx": "dbrx.cpp",
            "olmo": "olmo.cpp",
            "olmoe": "olmoe.cpp",
            "openelm": "openelm.cpp",
            "arctic": "arctic.cpp",
            "deepseek": "deepseek.cpp",
            "deepseek2-ocr": "deepseek2ocr.cpp",
            "chatglm": "chatglm.cpp",
            "glm4": "glm4.cpp",
            "glm4moe": "glm4-moe.cpp",
            "bitnet": "bitnet.cpp",
            "jais": "jais.cpp",
            "jais2": "jais2.cpp",
            "nemotron": "nemotron.cpp",
            "exaone": "exaone.cpp",
            "granite": "granite.cpp",
            "granitemoe": "granite-moe.cpp",
            "graniteswitch": "granite-switch.cpp",
            "chameleon": "chameleon.cpp",
            "plm": "plm.cpp",
            "bailingmoe": "bailingmoe.cpp",
            "bailingmoe2": "bailingmoe2.cpp",
            "dots1": "dots1.cpp",
            "arcee": "arcee.cpp",
            "ernie4_5": "ernie4-5.cpp",
            "ernie4_5-moe": "ernie4-5.cpp",
            "paddleocr": "ernie4-5.cpp",
            "hunyuan-moe": "hunyuan-moe.cpp",
            "hunyuan-dense": "hunyuan-vl.cpp",
            "hunyuan_vl": "hunyuan-vl.cpp",
            "hy_v3": "hy-v3.cpp",
            "smollm3": "smollm3.cpp",
            "seed_oss": "seed-oss.cpp",
            "grovemoe": "grovemoe.cpp",
            "apertus": "apertus.cpp",
            "hrm_text": "hrm-text.cpp",
            "minimax-m2": "minimax-m2.cpp",
            "cogvlm": "cogvlm.cpp",
            "pangu-embedded": "pangu-embed.cpp",
            "mistral3": "mistral3.cpp",
            "nanbeige": "nanbeige.cpp",
        }.items()
    },
}

UNCHECKED_ARCHS: Final = frozenset(
    {
        # hybrid filters and state formulas without a zoo model in tests/agreement yet
        "falcon-h1",
        "nemotron_h",
        "nemotron_h_moe",
        "jamba",
        "plamo2",
        "kimi-linear",
        "kimi-k3",
        "bailingmoe3",
        "minimax-01",
        "glm5-next",
        # sparse-attention variants of a checked mechanism with other layer filters
        "glm-dsa",
        "hy_v4",
        "dots3note",
        "minimax-m3",
        # layer counts llama.cpp changes while loading
        "graniteswitch",
        "nanbeige",
        "t5encoder",
    }
)
"""Architectures whose KV rule is read from the source but not yet checked against the
engine by a model of the same mechanism (tests/agreement): their figures are ``modelled``
and the app runs the engine check before it shows a verdict. Shrink this set as the zoo grows."""

COMPUTE_CHECKED_ARCHS: Final = frozenset(
    {
        # the compute graph (app/predict/graph/models.py BUILDERS) rebuilds llama.cpp's
        # reserve graph node for node on a real or zoo model of these architectures
        # (tests/agreement/test_compute_graph.py)
        "llama",
        "mistral3",
        "deci",
        "qwen2",
        "qwen3",
        "phi3",
        "gemma2",
        "gemma3",
        "cohere2",
        "gpt-oss",
        "qwen3moe",
        "deepseek2",
        "glm4moe",
        "mamba",
        "mamba2",
        "granitehybrid",
        "lfm2",
        "rwkv6",
        "rwkv7",
        "llama4",
        "gemma4",
        "gemma3n",
        "qwen35",
        "qwen35moe",
        "deepseek32",
        "t5",
    }
)
"""Architectures whose compute buffer ggtune models within tests/agreement's tolerance.
For every other one the compute figure is not known to be right: no verdict without the
engine's figure (the compute helper adds architectures here as it models them)."""

KNOWN_COMPUTE_ERRORS: Final[Mapping[str, str]] = MappingProxyType({})
"""Architectures of :data:`COMPUTE_CHECKED_ARCHS` whose rebuilt graph is exact on the zoo
but known to miss llama.cpp's compute buffer on real-size models: architecture -> the miss
as measured, with where docs/benchmarks.md writes it up (e.g. ``"qwen35": "-11.6 % on the
Qwen3.5 0.8B catalog stand-in at 64k, 4 unified streams (docs/benchmarks.md, Catalog
stand-ins beside the estimate)"``). Their compute figure counts as not known
(``MemoryEstimate.compute_known`` False): no verdict until the engine check gives
llama.cpp's figure, exactly as for an architecture without a graph.
tests/agreement/test_catalog_compute.py dry-runs the catalog's stand-ins and fails both
ways: an unmarked architecture that misses, a marked one that no longer does (then the
marking goes with the fix).

Empty: the misses found at real size so far (qwen35, qwen35moe: the unflagged
``t_h_nextn`` output; deepseek2: MLA's K cache is not rotated) are fixed."""
