"""Ollama: a Modelfile written exactly as Ollama's parser reads it, and the server settings.

Sources (ollama/ollama at fb30760, 2026-08-21): ``parser/parser.go`` (``ParseFile``,
``parseRuneForState``, ``quote``/``unquote``, ``Command.String``), ``api/types.go``
(``Options``/``Runner`` JSON tags, ``FormatParams``), ``llm/llama_server.go`` (how options
become llama-server flags), ``envconfig/config.go`` and ``docs/faq.mdx`` (server variables
and how to set them per OS). See docs/sources.md §2 and §3.

How Ollama runs a model: it starts llama-server with ``-c num_ctx·OLLAMA_NUM_PARALLEL
-np OLLAMA_NUM_PARALLEL`` (one KV stream per slot, never unified, no ``--swa-full``),
``--cache-type-k/-v $OLLAMA_KV_CACHE_TYPE`` (one type for both), ``--flash-attn`` from
``OLLAMA_FLASH_ATTENTION`` (unset = auto), ``-ngl num_gpu`` only when ``num_gpu`` ≥ 0,
``-b num_batch -ub num_batch``, ``--load-mode none`` for ``use_mmap false``, ``-t
num_thread``. So :class:`~app.settings.Settings` (``n_ctx`` = all cells) maps to
``num_ctx = n_ctx / n_parallel`` in the Modelfile and the rest to server variables that
no Modelfile can carry.

The parser, mirrored by :func:`parse_modelfile`:

- a command is a word of letters at the start of a line (after optional blanks),
  case-insensitive: FROM, PARAMETER, TEMPLATE, SYSTEM, ADAPTER, LICENSE, MESSAGE,
  REQUIRES, DRAFT, RENDERER, PARSER; anything else is an error;
- ``#`` starts a comment only where a command could start; later on a line it is text;
- a value runs to the end of the line, blanks at both ends trimmed; ``"…"`` or
  ``\"\"\"…\"\"\"`` around it are removed and may span lines; there are no escapes;
- characters that are neither printable nor tab/CR/LF are silently dropped;
- PARAMETER names keep their case and must be ``api.Options`` JSON tags (lower case).

Example::

    out = export_ollama("/models/gemma-3-270m-q4_k_m.gguf", settings, facts=facts)
    print(out.modelfile)                 # FROM /models/… / PARAMETER num_ctx 8192 …
    print(out.env_instructions("linux")) # systemctl edit ollama.service …
    imported = settings_from_modelfile(out.modelfile, num_parallel=2, kv_cache_type="q8_0")
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from app.errors import ExportError, SettingsError
from app.export.common import ModelFacts, SystemName, powershell_join
from app.settings import ALL_LAYERS, CacheType, FlashAttn, Settings, runner_defaults

__all__ = [
    "NUM_GPU_ALL",
    "OLLAMA_KV_TYPES",
    "ImportedModelfile",
    "ModelfileCommand",
    "OllamaExport",
    "export_ollama",
    "format_modelfile",
    "ollama_view",
    "parse_modelfile",
    "quote_value",
    "settings_from_modelfile",
]

OLLAMA_KV_TYPES: Final[tuple[CacheType, ...]] = ("f16", "q8_0", "q4_0")
"""KV cache types Ollama documents for ``OLLAMA_KV_CACHE_TYPE`` (docs/faq.mdx; its memory
planner, ``fs/ggml/ggml.go`` ``kvCacheBytesPerElement``, sizes any other type as f16)."""

NUM_GPU_ALL: Final = 999
"""``num_gpu`` written for "every layer": Ollama passes ``-ngl 999`` and llama.cpp caps it at
the model's layer count (``llama_model::n_gpu_layers``). ``num_gpu -1`` would instead let
llama-server fit as many layers as it thinks fit."""


COMMANDS: Final = (
    "from",
    "license",
    "template",
    "system",
    "adapter",
    "draft",
    "renderer",
    "parser",
    "parameter",
    "message",
    "requires",
)
_ROLES: Final = ("system", "user", "assistant")

# api.Options + api.Runner JSON tags and their Go kinds (api/types.go).
_INT_PARAMS: Final = frozenset(
    {
        "num_ctx",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "num_thread",
        "draft_num_predict",
        "num_keep",
        "seed",
        "num_predict",
        "top_k",
        "repeat_last_n",
    }
)
_FLOAT_PARAMS: Final = frozenset(
    {
        "top_p",
        "min_p",
        "typical_p",
        "temperature",
        "repeat_penalty",
        "presence_penalty",
        "frequency_penalty",
    }
)
_BOOL_PARAMS: Final = frozenset({"use_mmap"})
_LIST_PARAMS: Final = frozenset({"stop"})
PARAMETER_NAMES: Final = _INT_PARAMS | _FLOAT_PARAMS | _BOOL_PARAMS | _LIST_PARAMS
# parser.go deprecatedParameters: accepted with a warning, then ignored.
_DEPRECATED: Final = frozenset(
    {
        "penalize_newline",
        "low_vram",
        "f16_kv",
        "logits_all",
        "vocab_only",
        "use_mlock",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
    }
)

# Go's unicode.IsSpace, which strings.TrimSpace trims.
_GO_SPACE: Final = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # noqa: E501


# --------------------------------------------------------------------------- the parser


@dataclass(frozen=True, slots=True)
class ModelfileCommand:
    """One command as Ollama's parser returns it.

    ``name`` is ``"model"`` for FROM, the lower-case command word otherwise, and for
    PARAMETER the parameter's name exactly as written; ``args`` is the unquoted value
    (for MESSAGE ``"role: content"``).
    """

    name: str
    args: str


_NIL, _NAME, _VALUE, _PARAMETER, _MESSAGE, _COMMENT = range(6)


class _UnexpectedEOF(Exception):
    pass


class _InvalidCommand(Exception):
    pass


def _is_space(c: str) -> bool:
    return c in (" ", "\t")


def _is_newline(c: str) -> bool:
    return c in ("\r", "\n")


def _is_alpha(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z")


def _is_print(c: str) -> bool:
    # Go strconv.IsPrint: letters, marks, numbers, punctuation, symbols and ASCII space;
    # Python's isprintable() has the same definition (Unicode versions may differ).
    return c.isprintable()


def _go_trim_space(s: str) -> str:
    return s.strip(_GO_SPACE)


def _unquote(s: str) -> tuple[str, bool]:
    if s[:3] == '"""':
        if len(s) >= 6 and s[-3:] == '"""':
            return s[3:-3], True
        return "", False
    if s[:1] == '"':
        if len(s) >= 2 and s[-1] == '"':
            return s[1:-1], True
        return "", False
    return s, True


def _next_state(c: str, state: int) -> tuple[int, str]:
    """parseRuneForState: return the next state and the character to keep ("" = none)."""
    if state == _NIL:
        if c == "#":
            return _COMMENT, ""
        if _is_space(c) or _is_newline(c):
            return _NIL, ""
        return _NAME, c
    if state == _NAME:
        if _is_alpha(c):
            return _NAME, c
        if _is_space(c):
            return _VALUE, ""
        raise _InvalidCommand
    if state == _VALUE:
        if _is_newline(c) or _is_space(c):
            return _NIL, c
        return _VALUE, c
    if state == _PARAMETER:
        if _is_alpha(c) or (c.isascii() and c.isdigit()) or c == "_":
            return _PARAMETER, c
        if _is_space(c):
            return _VALUE, ""
        raise _UnexpectedEOF
    if state == _MESSAGE:
        if _is_alpha(c):
            return _MESSAGE, c
        if _is_space(c):
            return _VALUE, ""
        raise _UnexpectedEOF
    # _COMMENT
    if _is_newline(c):
        return _NIL, ""
    return _COMMENT, ""


def _decode(data: bytes) -> str:
    # unicode.BOMOverride(UTF8): a UTF-8 or UTF-16 byte-order mark picks the encoding;
    # invalid UTF-8 becomes U+FFFD.
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="replace")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


def parse_modelfile(source: str | bytes) -> tuple[ModelfileCommand, ...]:
    """Parse a Modelfile exactly as Ollama's ``parser.ParseFile`` does.

    Raise :class:`~app.errors.ExportError` with Ollama's own wording (``"(line 3):
    command must be one of …"``, ``"unexpected EOF: …"``, ``"no FROM line"``) where Ollama
    would refuse the file.
    """
    text = _decode(source) if isinstance(source, bytes) else source.removeprefix("\ufeff")
    commands: list[ModelfileCommand] = []
    buf: list[str] = []
    name = ""
    role = ""
    state = _NIL
    line = 1
    for c in text:
        if _is_newline(c):
            line += 1
        try:
            nxt, r = _next_state(c, state)
        except _UnexpectedEOF:
            raise ExportError(f"Modelfile: unexpected EOF: {''.join(buf)}") from None
        except _InvalidCommand:
            raise ExportError(f"Modelfile (line {line}): {_INVALID_COMMAND}") from None
        if nxt != state:
            if state == _NAME:
                word = "".join(buf)
                if word.lower() not in COMMANDS:
                    raise ExportError(f"Modelfile (line {line}): {_INVALID_COMMAND}")
                lower = word.lower()
                if lower == "from":
                    name = "model"
                elif lower == "parameter":
                    nxt = _PARAMETER
                elif lower == "message":
                    nxt = _MESSAGE
                    name = lower
                else:
                    name = lower
            elif state == _PARAMETER:
                name = "".join(buf)
            elif state == _MESSAGE:
                word = "".join(buf)
                if word not in _ROLES:
                    raise ExportError(
                        f"Modelfile (line {line}): message role must be one of "
                        '"system", "user", or "assistant"'
                    )
                role = word
            elif state == _VALUE:
                value, ok = _unquote(_go_trim_space("".join(buf)))
                if not ok or _is_space(r):
                    buf.append(r)
                    continue
                if role:
                    value = f"{role}: {value}"
                    role = ""
                commands.append(ModelfileCommand(name, value))
            buf.clear()
            state = nxt
        if r and _is_print(r):
            buf.append(r)

    if state == _VALUE:
        value, ok = _unquote(_go_trim_space("".join(buf)))
        if not ok:
            raise ExportError(f"Modelfile: unexpected EOF: {''.join(buf)}")
        if role:
            value = f"{role}: {value}"
        commands.append(ModelfileCommand(name, value))
    elif state not in (_NIL, _COMMENT):
        raise ExportError(f"Modelfile: unexpected EOF: {''.join(buf)}")
    if not any(c.name == "model" for c in commands):
        raise ExportError("Modelfile: no FROM line")
    return tuple(commands)


_INVALID_COMMAND: Final = (
    'command must be one of "from", "license", "template", "system", "adapter", "draft", '
    '"renderer", "parser", "parameter", "message", or "requires"'
)


# --------------------------------------------------------------------------- the writer


def quote_value(value: str) -> str:
    """Return ``value`` written so that Ollama's parser reads back exactly ``value``.

    Ollama's own writer (``parser.quote``) quotes only values with a newline or a leading
    or trailing space, using ``\"\"\"`` when the value holds a ``"``. That loses a value
    that starts with ``"`` (it would be unquoted), ends in a tab or holds a lone CR, so
    those are quoted too. Raise :class:`~app.errors.ExportError` for a value no Modelfile
    can carry: one with characters the parser drops (control and format characters,
    non-ASCII spaces) or with a ``\"\"\"`` that would end the quotes early.
    """
    for c in value:
        if not (_is_print(c) or c in "\t\r\n"):
            shown = repr(value) if len(value) <= 40 else repr(value[:40]) + "…"
            raise ExportError(
                f"{shown}: U+{ord(c):04X} cannot be written to a Modelfile "
                "(Ollama's parser drops characters that are not printable)"
            )
    needs_quotes = (
        value == ""
        or "\n" in value
        or "\r" in value
        or _go_trim_space(value) != value
        or value.startswith('"')
    )
    if not needs_quotes:
        return value
    forms = ['"""' + value + '"""', '"' + value + '"']
    if '"' not in value:
        forms.reverse()  # Ollama's choice: plain quotes unless the value holds a quote
    for form in forms:
        if _reads_back(form) == value:
            return form
    raise ExportError(
        f"{value[:60]!r}: cannot be written to a Modelfile so that Ollama reads it back "
        'unchanged (Ollama has no escapes; a line ending in """ closes the value)'
    )


def _reads_back(quoted: str) -> str | None:
    try:
        commands = parse_modelfile(f"FROM x\nPARAMETER stop {quoted}\n")
    except ExportError:
        return None
    if len(commands) != 2:
        return None
    return commands[1].args


_PARAM_NAME = re.compile(r"[A-Za-z0-9_]+")


def format_command(cmd: ModelfileCommand) -> str:
    """Return one command as a Modelfile line (``Command.String`` with safe quoting)."""
    if cmd.name == "model":
        return f"FROM {quote_value(cmd.args)}"
    if cmd.name in COMMANDS:
        if cmd.name == "message":
            role, _, content = cmd.args.partition(": ")
            if role not in _ROLES:
                raise ExportError(f"MESSAGE role must be system, user or assistant, not {role!r}")
            return f"MESSAGE {role} {quote_value(content)}"
        return f"{cmd.name.upper()} {quote_value(cmd.args)}"
    if not _PARAM_NAME.fullmatch(cmd.name):
        raise ExportError(f"{cmd.name!r} is not a valid PARAMETER name")
    return f"PARAMETER {cmd.name} {quote_value(cmd.args)}"


def format_modelfile(commands: Iterable[ModelfileCommand], *, comments: Sequence[str] = ()) -> str:
    """Return a Modelfile: ``comments`` as ``#`` lines first, then one line per command."""
    lines = []
    for comment in comments:
        for part in comment.splitlines() or [""]:
            lines.append(f"# {part}".rstrip())
    lines.extend(format_command(c) for c in commands)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class OllamaExport:
    """A Modelfile plus the server-wide settings a Modelfile cannot carry.

    ``env`` holds the variables to set on the Ollama server, ``unset_env`` those to leave
    unset (Ollama's "auto"). ``model_name`` is the name suggested for ``ollama create``.
    ``notes`` say where Ollama will run something other than the settings asked for.
    """

    modelfile: str
    commands: tuple[ModelfileCommand, ...]
    env: tuple[tuple[str, str], ...]
    unset_env: tuple[str, ...]
    model_name: str
    notes: tuple[str, ...] = ()

    def create_command(self, modelfile_path: str = "Modelfile", *, windows: bool = False) -> str:
        """Return ``ollama create NAME -f PATH`` quoted for POSIX shells or PowerShell."""
        argv = ("ollama", "create", self.model_name, "-f", modelfile_path)
        return powershell_join(argv) if windows else shlex.join(argv)

    def env_instructions(self, system: SystemName) -> str:
        """Return step-by-step instructions to set the server variables on ``system``."""
        if not self.env and not self.unset_env:
            return "No server settings needed: Ollama's defaults match."
        if system == "linux":
            lines = [
                "Ollama as a systemd service: run `sudo systemctl edit ollama.service`, add",
                "",
                "[Service]",
                *(f'Environment="{k}={v}"' for k, v in self.env),
                "",
            ]
            if self.unset_env:
                lines += [
                    "and remove any Environment line for "
                    + ", ".join(self.unset_env)
                    + " (unset means auto).",
                    "",
                ]
            lines += [
                "then restart the server:",
                "",
                "sudo systemctl daemon-reload",
                "sudo systemctl restart ollama",
            ]
            return "\n".join(lines)
        if system == "macos":
            lines = [
                "Ollama as the macOS app: run",
                "",
                *(f"launchctl setenv {k} {shlex.quote(v)}" for k, v in self.env),
                *(f"launchctl unsetenv {k}" for k in self.unset_env),
                "",
                "then quit Ollama from the menu bar and start it again.",
            ]
            return "\n".join(lines)
        lines = [
            "Ollama on Windows: quit Ollama from the task bar, then in a terminal run",
            "",
            *(f"setx {k} {_cmd_quote(v)}" for k, v in self.env),
            *(
                f"[Environment]::SetEnvironmentVariable('{k}', $null, 'User')"
                for k in self.unset_env
            ),
            "",
            "then start Ollama again from the Start menu (it reads the variables at start).",
        ]
        return "\n".join(lines)

    def render(self, system: SystemName, *, modelfile_path: str = "Modelfile") -> str:
        """Return everything a person needs: the Modelfile, server settings, commands."""
        parts = [
            f"# --- {modelfile_path} ---",
            self.modelfile.rstrip("\n"),
            "",
            "# --- server settings (Ollama reads these at start; they apply to every model) ---",
            self.env_instructions(system),
            "",
            "# --- create and run ---",
            self.create_command(modelfile_path, windows=system == "windows"),
            shlex.join(("ollama", "run", self.model_name)),
        ]
        if self.notes:
            parts += ["", "# --- notes ---", *(f"- {n}" for n in self.notes)]
        return "\n".join(parts) + "\n"


def _cmd_quote(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_.:\-]+", value) else '"' + value + '"'


def ollama_view(settings: Settings, *, n_ctx_train: int | None = None) -> Settings:
    """Return what Ollama will run for ``settings``: the subset it can express.

    ``n_batch`` becomes ``n_ubatch`` (``num_batch`` sets both), the cache is never unified
    and never a full-size sliding-window cache, and the context is a whole number of
    tokens per slot (capped at the training context when ``n_ctx_train`` is given).
    """
    n_ctx = settings.n_ctx
    if n_ctx == 0:
        if n_ctx_train is None:
            raise ExportError(
                "context 0 means the training context, which Ollama cannot express; give "
                "the model file or a context size"
            )
        n_ctx = n_ctx_train * settings.n_parallel
    num_ctx = n_ctx // settings.n_parallel
    if n_ctx_train is not None and n_ctx_train > 0:
        num_ctx = min(num_ctx, n_ctx_train)  # llm/server.go NewLlamaServer
    return settings.replace(
        n_ctx=num_ctx * settings.n_parallel,
        n_batch=settings.n_ubatch,
        kv_unified=False,
        swa_full=False,
        n_gpu_layers=ALL_LAYERS if settings.n_gpu_layers >= NUM_GPU_ALL else settings.n_gpu_layers,
        n_cpu_moe=0,
        tensor_split=(),
        offload_kqv=True,
    )


_OLLAMA_NAME_PART = re.compile(r"[^A-Za-z0-9_.\-]+")


_NAME_BYTES: Final = re.compile(r"[A-Za-z0-9_.\-]+")
_MAX_NAME_LEN: Final = 128  # MaxNamePartLen, applied to the whole name


def check_ollama_name(name: str) -> str:
    """Return ``name`` if ``ollama create`` accepts it, else raise ExportError.

    The rules of Ollama's ``types/model/name.go`` (``ParseName``, ``isValidByteFor``):
    ``[host/][namespace/]model[:tag]``, at most 128 characters, every part non-empty and
    made of letters, digits, ``_``, ``-`` and ``.`` (no ``.`` in the namespace, never two
    in a row). A name outside them would also be pasted into a shell by whoever copies the
    Modelfile's ``ollama create`` line.
    """
    bad = ExportError(
        f"{name!r} is not a name Ollama accepts: [host/][namespace/]model[:tag] of letters, "
        f"digits, '_', '-' and '.', at most {_MAX_NAME_LEN} characters"
    )
    if not 0 < len(name) <= _MAX_NAME_LEN or ".." in name:
        raise bad
    path, _, tag = name.partition(":")
    parts = path.split("/")
    if len(parts) > 3 or (":" in name and not tag):
        raise bad
    for i, part in enumerate([*parts, *([tag] if tag else [])]):
        namespace = len(parts) >= 2 and i == len(parts) - 2
        if not _NAME_BYTES.fullmatch(part) or (namespace and "." in part):
            raise bad
    return name


def _suggest_name(model: str, facts: ModelFacts | None) -> str:
    base = Path(model).name.removesuffix(".gguf") if facts is not None else model
    base = base.split(":")[0].rsplit("/", 1)[-1]
    slug = re.sub(r"\.{2,}", ".", _OLLAMA_NAME_PART.sub("-", base)).strip("-.").lower() or "model"
    return f"{slug[:80]}:ggtune"


def _resolve_model(
    model: str | os.PathLike[str], *, base_dir: Path | None, placeholder: bool = False
) -> tuple[str, bool]:
    """Return (FROM value, is_local_file); a path-like model must exist (parser.go: a
    missing path is silently taken as a model name to pull) unless it is a
    ``placeholder`` the user fills in, written as it is."""
    text = os.fspath(model)
    if placeholder:
        return text, True
    looks_like_path = (
        isinstance(model, os.PathLike)
        or text.lower().endswith(".gguf")
        or text.startswith(("/", "~", "./", "../", ".\\", "..\\", "\\"))
        or re.match(r"^[A-Za-z]:[\\/]", text) is not None
    )
    path = Path(text).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if path.is_file():
        return str(path.resolve()), True
    if looks_like_path:
        raise ExportError(
            f"{text}: no such file; Ollama would silently try to pull a model of that name"
        )
    if not re.fullmatch(r"[A-Za-z0-9_.\-/:]+", text):
        raise ExportError(f"{text!r} is neither an existing file nor an Ollama model name")
    return text, False


def export_ollama(
    model: str | os.PathLike[str],
    settings: Settings,
    *,
    facts: ModelFacts | None = None,
    name: str | None = None,
    draft: str | os.PathLike[str] | None = None,
    draft_num_predict: int | None = None,
    num_thread: int | None = None,
    num_predict: int | None = None,
    stop: Sequence[str] = (),
    gpu_overhead_bytes: int | None = None,
    base_dir: Path | None = None,
    placeholder: bool = False,
    num_gpu_auto: bool = False,
    fitting: Sequence[str] = (),
) -> OllamaExport:
    """Return the Modelfile and server settings that make Ollama run ``settings``.

    ``model`` is a local GGUF (it must exist; written as an absolute path) or the name of
    a model already in Ollama; with ``placeholder`` it is a path written as it is, for a
    model not downloaded yet (the user puts the real path there). ``facts`` (from
    :func:`~app.export.common.model_facts`) resolve a context of 0 and cap the context at
    the training length. ``draft`` is a
    local GGUF for speculative decoding (DRAFT; it must exist and differ from the model).
    Raise :class:`~app.errors.ExportError` for what Ollama cannot run at all: a KV type
    other than f16/q8_0/q4_0, different K and V types, a quantized cache without flash
    attention. ``num_gpu_auto`` leaves ``num_gpu`` out, so Ollama passes no ``-ngl`` and
    llama-server's ``--fit`` places the layers (``llm/llama_server.go``); ``fitting`` are
    comment lines saying what that fit will do.
    """
    from_value, local = _resolve_model(model, base_dir=base_dir, placeholder=placeholder)
    notes: list[str] = []
    s = settings
    if s.cache_type_k != s.cache_type_v:
        raise ExportError(
            f"Ollama has one KV cache type for K and V (OLLAMA_KV_CACHE_TYPE); "
            f"K {s.cache_type_k} and V {s.cache_type_v} cannot be expressed — pick one type, "
            "or export for llama-server"
        )
    if s.cache_type_k not in OLLAMA_KV_TYPES:
        raise ExportError(
            f"Ollama's KV cache types are {', '.join(OLLAMA_KV_TYPES)}; "
            f"{s.cache_type_k} cannot be expressed — export for llama-server instead"
        )
    if s.cache_type_k != "f16" and s.flash_attn == "off":
        raise ExportError(
            f"a {s.cache_type_k} KV cache needs flash attention; Ollama would refuse "
            "OLLAMA_FLASH_ATTENTION=0 with it (set flash attention on or auto)"
        )
    n_ctx_train = facts.n_ctx_train if facts is not None and facts.n_ctx_train > 0 else None
    view = ollama_view(s, n_ctx_train=n_ctx_train)
    num_ctx = view.n_ctx // view.n_parallel
    wanted = s.n_ctx if s.n_ctx else (n_ctx_train or 0) * s.n_parallel
    if wanted % s.n_parallel:
        notes.append(
            f"{wanted} tokens do not split evenly over {s.n_parallel} slots: num_ctx "
            f"{num_ctx} per slot, {view.n_ctx} in all"
        )
    if n_ctx_train is not None and wanted // s.n_parallel > n_ctx_train:
        notes.append(f"Ollama caps num_ctx at the model's training context ({n_ctx_train} tokens)")
    if s.n_batch != s.n_ubatch:
        notes.append(
            f"Ollama's num_batch sets both batch sizes (-b and -ub): num_batch {s.n_ubatch} "
            f"keeps the micro-batch (memory) of the settings; the logical batch becomes "
            f"{s.n_ubatch}, not {s.n_batch}"
        )
    if s.kv_unified and s.n_parallel > 1:
        notes.append(
            "Ollama gives each slot its own KV cache (llama-server -np without -kvu); "
            "a unified cache cannot be expressed"
        )
    if s.swa_full and (facts is None or facts.n_swa > 0):
        notes.append(
            "Ollama runs llama-server without --swa-full: sliding-window layers keep "
            "a window-sized cache"
        )
    if s.n_cpu_moe:
        notes.append(
            f"Ollama cannot keep MoE experts on the CPU (-ncmoe {s.n_cpu_moe} is not applied); "
            "export for llama-server to keep it"
        )
    if s.tensor_split:
        notes.append("Ollama has no tensor split across GPUs; it places layers itself")
    if not s.offload_kqv:
        notes.append("Ollama always keeps the KV cache with its layers (no -nkvo)")
    if not s.repack:
        notes.append(
            "Ollama has no option to turn weight repacking off (llama-server --no-repack); "
            "export for llama-server to keep it"
        )

    commands = [ModelfileCommand("model", from_value)]
    if draft is not None:
        draft_value, draft_local = _resolve_model(draft, base_dir=base_dir)
        if not draft_local:
            raise ExportError(f"{draft}: DRAFT must be a local GGUF file (parser.go)")
        if local and not placeholder and os.path.samefile(draft_value, from_value):
            raise ExportError("DRAFT must not be the same file as FROM (parser.go)")
        commands.append(ModelfileCommand("draft", draft_value))
    params: list[tuple[str, str]] = [("num_ctx", str(num_ctx))]
    if not num_gpu_auto:
        params.append(
            ("num_gpu", str(NUM_GPU_ALL if s.n_gpu_layers == ALL_LAYERS else s.n_gpu_layers))
        )
    params += [("num_batch", str(s.n_ubatch)), ("use_mmap", "true" if s.use_mmap else "false")]
    if num_thread is not None:
        params.append(("num_thread", str(num_thread)))
    if num_predict is not None:
        params.append(("num_predict", str(num_predict)))
    if draft_num_predict is not None:
        params.append(("draft_num_predict", str(draft_num_predict)))
    params += [("stop", value) for value in stop]
    commands += [ModelfileCommand(k, v) for k, v in params]

    env: list[tuple[str, str]] = [
        ("OLLAMA_NUM_PARALLEL", str(s.n_parallel)),
        ("OLLAMA_KV_CACHE_TYPE", s.cache_type_k),
    ]
    unset: list[str] = []
    if s.flash_attn == "auto":
        unset.append("OLLAMA_FLASH_ATTENTION")
    else:
        env.append(("OLLAMA_FLASH_ATTENTION", "1" if s.flash_attn == "on" else "0"))
    if gpu_overhead_bytes is not None:
        env.append(("OLLAMA_GPU_OVERHEAD", str(gpu_overhead_bytes)))
    notes.append(
        "OLLAMA_NUM_PARALLEL, OLLAMA_KV_CACHE_TYPE and OLLAMA_FLASH_ATTENTION apply to every "
        "model the server loads; OLLAMA_CONTEXT_LENGTH is not needed (num_ctx is set here)"
    )

    model_name = (
        check_ollama_name(name)
        if name is not None
        else _suggest_name(from_value, facts if local else None)
    )
    where = from_value if local else f"the Ollama model {from_value}"
    comments = [
        f"Written by ggtune for {where}",
        f"engine context {view.n_ctx} tokens = num_ctx {num_ctx} x OLLAMA_NUM_PARALLEL "
        f"{s.n_parallel}; KV cache {s.cache_type_k}; flash attention {s.flash_attn}",
        *fitting,
        f"Create it with: ollama create {shlex.quote(model_name)} -f Modelfile",
    ]
    text = format_modelfile(commands, comments=comments)
    # The file must read back as written (parser.go is the judge, mirrored here).
    assert parse_modelfile(text) == tuple(commands), "Modelfile does not read back as written"
    return OllamaExport(
        modelfile=text,
        commands=tuple(commands),
        env=tuple(env),
        unset_env=tuple(unset),
        model_name=model_name,
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------- the reader


@dataclass(frozen=True, slots=True)
class ImportedModelfile:
    """Settings read from a Modelfile, with what the Modelfile does not decide.

    ``model`` is the FROM value (a path or an Ollama model name), ``draft`` the DRAFT value.
    ``parameters`` holds every PARAMETER as Ollama types it (``stop`` as a tuple).
    ``notes`` name deprecated parameters Ollama ignores and values taken from elsewhere.
    """

    settings: Settings
    model: str
    draft: str | None
    parameters: Mapping[str, object]
    commands: tuple[ModelfileCommand, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def stop(self) -> tuple[str, ...]:
        """Return the stop strings in file order."""
        value = self.parameters.get("stop", ())
        assert isinstance(value, tuple), "stop is always a tuple"
        return value


_GO_INT = re.compile(r"[+-]?[0-9]+")
_GO_FLOAT = re.compile(
    r"[+-]?(?:(?:[0-9](?:_?[0-9])*)?\.?[0-9](?:_?[0-9])*(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)",
    re.IGNORECASE,
)
_GO_TRUE: Final = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE: Final = ("0", "f", "F", "FALSE", "false", "False")


def _typed_parameter(key: str, value: str) -> object:
    """api.FormatParams for one value: the Go kind decides the parse."""
    if key in _INT_PARAMS:
        if not _GO_INT.fullmatch(value) or not -(2**63) <= int(value) < 2**63:
            raise ExportError(f"Modelfile: invalid int value [{value}] for {key}")
        return int(value)
    if key in _FLOAT_PARAMS:
        if not _GO_FLOAT.fullmatch(value):
            raise ExportError(f"Modelfile: invalid float value [{value}] for {key}")
        return float(value.replace("_", ""))
    if key in _BOOL_PARAMS:
        if value in _GO_TRUE:
            return True
        if value in _GO_FALSE:
            return False
        raise ExportError(f"Modelfile: invalid bool value [{value}] for {key}")
    return value


def settings_from_modelfile(
    source: str | bytes | Sequence[ModelfileCommand],
    *,
    num_parallel: int = 1,
    kv_cache_type: str = "f16",
    flash_attention: FlashAttn = "auto",
    gpu_total_bytes: int | None = None,
) -> ImportedModelfile:
    """Read a Modelfile's settings as the engine will see them.

    A Modelfile holds only per-model parameters; the server decides the rest, so give
    ``num_parallel`` (``OLLAMA_NUM_PARALLEL``), ``kv_cache_type`` (``OLLAMA_KV_CACHE_TYPE``)
    and ``flash_attention`` (``OLLAMA_FLASH_ATTENTION``: on, off, or auto when unset).
    Parameters left out take Ollama's defaults (:func:`~app.settings.runner_defaults`,
    whose context depends on ``gpu_total_bytes``). Raise :class:`~app.errors.ExportError`
    where ``ollama create`` would fail (unknown parameter, a value of the wrong type).
    """
    if isinstance(source, str | bytes):
        commands = parse_modelfile(source)
    else:
        commands = tuple(source)
    kv = kv_cache_type.strip().lower() or "f16"
    if kv not in OLLAMA_KV_TYPES:
        raise ExportError(f"OLLAMA_KV_CACHE_TYPE {kv_cache_type!r} is not one of f16, q8_0, q4_0")
    notes: list[str] = []
    params: dict[str, object] = {}
    model = ""
    draft: str | None = None
    for cmd in commands:
        if cmd.name == "model":
            model = cmd.args
        elif cmd.name == "draft":
            draft = cmd.args
        elif cmd.name in COMMANDS:
            continue  # template, system, license, …: not settings
        elif cmd.name in _DEPRECATED:
            notes.append(f"parameter {cmd.name} is deprecated; Ollama ignores it")
        elif cmd.name not in PARAMETER_NAMES:
            raise ExportError(f"Modelfile: unknown parameter '{cmd.name}'")
        elif cmd.name in _LIST_PARAMS:
            previous = params.get(cmd.name, ())
            assert isinstance(previous, tuple), "list parameters are tuples"
            params[cmd.name] = (*previous, cmd.args)
        else:
            params[cmd.name] = _typed_parameter(cmd.name, cmd.args)

    base = runner_defaults("ollama", gpu_total_bytes=gpu_total_bytes)
    changes: dict[str, object] = {
        "n_parallel": num_parallel,
        "cache_type_k": kv,
        "cache_type_v": kv,
        "flash_attn": flash_attention,
        "kv_unified": False,
        "swa_full": False,
    }
    num_ctx = params.get("num_ctx")
    per_slot = num_ctx if isinstance(num_ctx, int) and num_ctx > 0 else base.n_ctx
    changes["n_ctx"] = per_slot * num_parallel
    num_gpu = params.get("num_gpu")
    if isinstance(num_gpu, int):
        if num_gpu < 0:
            notes.append("num_gpu -1: llama-server decides how many layers fit (read as all)")
            changes["n_gpu_layers"] = ALL_LAYERS
        elif num_gpu >= NUM_GPU_ALL:
            changes["n_gpu_layers"] = ALL_LAYERS
        else:
            changes["n_gpu_layers"] = num_gpu
    num_batch = params.get("num_batch")
    if isinstance(num_batch, int) and num_batch > 0:
        changes["n_batch"] = changes["n_ubatch"] = num_batch
    use_mmap = params.get("use_mmap")
    if isinstance(use_mmap, bool):
        changes["use_mmap"] = use_mmap
    try:
        settings = base.replace(**changes)
    except SettingsError as err:
        raise ExportError(f"Modelfile: {err}") from err
    return ImportedModelfile(
        settings=settings,
        model=model,
        draft=draft,
        parameters=params,
        commands=commands,
        notes=tuple(notes),
    )
