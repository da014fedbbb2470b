"""The Modelfile writer and reader against the rules of Ollama's parser/parser.go.

One test per rule of docs/sources.md §3, then round-trip properties: whatever the
writer writes, the reader (a line-by-line mirror of ``ParseFile``) reads back unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import ExportError
from app.export.common import ModelFacts, model_facts
from app.export.ollama import (
    COMMANDS,
    NUM_GPU_ALL,
    ModelfileCommand,
    export_ollama,
    format_modelfile,
    ollama_view,
    parse_modelfile,
    quote_value,
    settings_from_modelfile,
)
from app.settings import ALL_LAYERS, Settings

C = ModelfileCommand


# --------------------------------------------------------------------------- parser rules


@pytest.mark.parametrize("word", ["FROM", "from", "FrOm"])
def test_commands_are_case_insensitive(word: str) -> None:
    assert parse_modelfile(f"{word} llama3\n") == (C("model", "llama3"),)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("from", "parameter")])
def test_every_command_is_accepted_and_lower_cased(command: str) -> None:
    value = "user hi" if command == "message" else "x"
    got = parse_modelfile(f"FROM m\n{command.upper()} {value}\n")
    expected = "user: hi" if command == "message" else "x"
    assert got[1] == C(command, expected)


def test_unknown_command_is_refused_with_the_line() -> None:
    with pytest.raises(ExportError, match=r"\(line 2\): command must be one of"):
        parse_modelfile("FROM m\nCONTEXT 4096\n")


def test_hash_is_a_comment_only_where_a_command_can_start() -> None:
    text = "# a comment\n   # indented comment\nFROM m\nPARAMETER stop a # b\n"
    assert parse_modelfile(text) == (C("model", "m"), C("stop", "a # b"))


def test_unquoted_value_runs_to_end_of_line_trimmed() -> None:
    assert parse_modelfile("FROM m\nSYSTEM   two  words \t \n")[1] == C("system", "two  words")


def test_quoted_values_span_lines_and_have_no_escapes() -> None:
    text = 'FROM m\nSYSTEM """line 1\nline "2"\\n"""\nTEMPLATE "a\nb"\n'
    got = parse_modelfile(text)
    assert got[1] == C("system", 'line 1\nline "2"\\n')
    assert got[2] == C("template", "a\nb")


def test_unterminated_quote_is_unexpected_eof() -> None:
    with pytest.raises(ExportError, match="unexpected EOF"):
        parse_modelfile('FROM m\nSYSTEM "never closed\n')


def test_parameter_names_keep_their_case_and_must_be_json_tags() -> None:
    commands = parse_modelfile("FROM m\nPARAMETER NUM_CTX 4096\n")
    assert commands[1] == C("NUM_CTX", "4096")
    with pytest.raises(ExportError, match="unknown parameter 'NUM_CTX'"):
        settings_from_modelfile(commands)


def test_parameter_values_are_typed_like_format_params() -> None:
    with pytest.raises(ExportError, match="invalid int value"):
        settings_from_modelfile("FROM m\nPARAMETER num_ctx 4k\n")
    with pytest.raises(ExportError, match="invalid bool value"):
        settings_from_modelfile("FROM m\nPARAMETER use_mmap yes\n")
    got = settings_from_modelfile("FROM m\nPARAMETER use_mmap F\nPARAMETER temperature 0.5\n")
    assert got.parameters == {"use_mmap": False, "temperature": 0.5}
    assert got.settings.use_mmap is False


def test_stop_is_repeatable_and_kept_in_order() -> None:
    got = settings_from_modelfile("FROM m\nPARAMETER stop a\nPARAMETER stop b\n")
    assert got.stop == ("a", "b")


def test_deprecated_parameters_are_ignored_with_a_note() -> None:
    got = settings_from_modelfile("FROM m\nPARAMETER use_mlock true\n")
    assert got.parameters == {}
    assert any("use_mlock" in n for n in got.notes)


def test_no_from_line_is_refused() -> None:
    with pytest.raises(ExportError, match="no FROM line"):
        parse_modelfile("PARAMETER num_ctx 4096\n")


def test_non_printable_characters_are_dropped_by_the_parser_and_refused_by_the_writer() -> None:
    assert parse_modelfile("FROM m\nSYSTEM a\u200bb\x07c\n")[1] == C("system", "abc")
    with pytest.raises(ExportError, match="U\\+200B"):
        quote_value("a\u200bb")


def test_utf8_bom_is_skipped() -> None:
    assert parse_modelfile(b"\xef\xbb\xbfFROM m\n") == (C("model", "m"),)


def test_crlf_line_endings() -> None:
    assert parse_modelfile("FROM m\r\nPARAMETER stop x\r\n") == (C("model", "m"), C("stop", "x"))


def test_writer_quotes_like_ollama() -> None:
    assert quote_value("plain value") == "plain value"
    assert quote_value(" lead") == '" lead"'
    assert quote_value("two\nlines") == '"two\nlines"'
    assert quote_value('say "hi"\n') == '"""say "hi"\n"""'
    # beyond Ollama's own writer: values it would lose
    assert quote_value('"quoted"') == '""""quoted""""'
    assert quote_value("tab\t") == '"tab\t"'
    assert quote_value("") == '""'


def test_writer_refuses_what_no_modelfile_can_hold() -> None:
    # a line ending in """ would close the quotes early
    with pytest.raises(ExportError, match="reads it back"):
        quote_value('a"""\nb')


# --------------------------------------------------------------------------- FROM / DRAFT


def test_from_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="no such file"):
        export_ollama(tmp_path / "missing.gguf", Settings(n_ctx=4096))


def test_a_placeholder_path_is_written_as_it_is(tmp_path: Path) -> None:
    """A model not downloaded yet (a catalog plan): the path the user will fill in."""
    placeholder = "/path/to/Llama-3.1-70B-Q4_K_M.gguf"
    out = export_ollama(placeholder, Settings(n_ctx=4096), placeholder=True)
    assert out.commands[0] == C("model", placeholder)
    assert f"FROM {placeholder}" in out.modelfile.splitlines()
    with pytest.raises(ExportError, match="no such file"):  # without the flag: refused
        export_ollama(placeholder, Settings(n_ctx=4096))


def test_from_an_ollama_model_name() -> None:
    out = export_ollama("qwen3:8b", Settings(n_ctx=4096))
    assert out.commands[0] == C("model", "qwen3:8b")
    assert out.modelfile.splitlines()[3] == "FROM qwen3:8b"


def test_from_local_path_is_absolute(smollm_path: Path) -> None:
    out = export_ollama(smollm_path, Settings(n_ctx=4096))
    assert out.commands[0] == C("model", str(smollm_path.resolve()))


def test_draft_must_differ_from_from(smollm_path: Path, gemma_path: Path) -> None:
    with pytest.raises(ExportError, match="DRAFT must not be the same"):
        export_ollama(smollm_path, Settings(n_ctx=4096), draft=smollm_path)
    out = export_ollama(gemma_path, Settings(n_ctx=4096), draft=smollm_path)
    assert C("draft", str(smollm_path.resolve())) in out.commands


# --------------------------------------------------------------------------- settings


def test_num_ctx_is_per_slot_and_server_settings_are_env(gemma_path: Path) -> None:
    s = Settings(
        n_ctx=16384,
        n_gpu_layers=ALL_LAYERS,
        n_parallel=4,
        cache_type_k="q8_0",
        cache_type_v="q8_0",
        flash_attn="on",
        n_batch=512,
        n_ubatch=512,
    )
    out = export_ollama(gemma_path, s, gpu_overhead_bytes=1 << 30)
    params = {c.name: c.args for c in out.commands}
    assert params["num_ctx"] == "4096"
    assert params["num_gpu"] == str(NUM_GPU_ALL)
    assert params["num_batch"] == "512"
    assert dict(out.env) == {
        "OLLAMA_NUM_PARALLEL": "4",
        "OLLAMA_KV_CACHE_TYPE": "q8_0",
        "OLLAMA_FLASH_ATTENTION": "1",
        "OLLAMA_GPU_OVERHEAD": str(1 << 30),
    }
    linux = out.env_instructions("linux")
    assert 'Environment="OLLAMA_KV_CACHE_TYPE=q8_0"' in linux
    assert "systemctl restart ollama" in linux
    assert "launchctl setenv OLLAMA_NUM_PARALLEL 4" in out.env_instructions("macos")
    assert "setx OLLAMA_FLASH_ATTENTION 1" in out.env_instructions("windows")
    assert out.create_command("My Modelfile") == (
        f"ollama create {out.model_name} -f 'My Modelfile'"
    )


def test_flash_attention_auto_leaves_the_variable_unset() -> None:
    out = export_ollama("m:latest", Settings(n_ctx=4096, flash_attn="auto"))
    assert "OLLAMA_FLASH_ATTENTION" not in dict(out.env)
    assert out.unset_env == ("OLLAMA_FLASH_ATTENTION",)
    assert "launchctl unsetenv OLLAMA_FLASH_ATTENTION" in out.env_instructions("macos")


@pytest.mark.parametrize(
    ("k", "v", "match"),
    [("q8_0", "f16", "one KV cache type"), ("q5_1", "q5_1", "f16, q8_0, q4_0")],
)
def test_kv_types_ollama_cannot_express_are_refused(k: str, v: str, match: str) -> None:
    s = Settings(n_ctx=4096, cache_type_k=k, cache_type_v=v, flash_attn="on")  # type: ignore[arg-type]
    with pytest.raises(ExportError, match=match):
        export_ollama("m:latest", s)


def test_context_zero_uses_the_training_context() -> None:
    facts = ModelFacts(path="x", name=None, n_layer_all=30, n_ctx_train=8192)
    out = export_ollama("m:latest", Settings(n_ctx=0, n_parallel=2), facts=facts)
    assert C("num_ctx", "8192") in out.commands
    with pytest.raises(ExportError, match="training context"):
        export_ollama("m:latest", Settings(n_ctx=0))


def test_context_above_training_is_capped_with_a_note(gemma_path: Path) -> None:
    facts = model_facts(gemma_path)
    out = export_ollama(gemma_path, Settings(n_ctx=65536), facts=facts)
    assert C("num_ctx", str(facts.n_ctx_train)) in out.commands
    assert any("caps num_ctx" in n for n in out.notes)


def test_what_ollama_cannot_do_is_noted() -> None:
    s = Settings(n_ctx=4096, n_parallel=2, kv_unified=True, n_cpu_moe=3, n_batch=2048)
    notes = " ".join(export_ollama("m:latest", s).notes)
    assert "unified cache cannot be expressed" in notes
    assert "-ncmoe 3 is not applied" in notes
    assert "num_batch 512" in notes


# --------------------------------------------------------------------------- round trips

_AWKWARD = st.text(
    alphabet=st.sampled_from(list(" \t\n\r\"#abcXYZ019_-:<|>é日本\U0001f600\\'")),
    max_size=40,
)


@given(_AWKWARD)
@settings(max_examples=400, deadline=None)
def test_any_value_reads_back_unchanged_or_is_refused_for_a_reason(value: str) -> None:
    try:
        quoted = quote_value(value)
    except ExportError:
        # Only values with a quote and a line break can defeat both quoting forms.
        assert '"' in value
        assert "\n" in value or "\r" in value
        return
    text = format_modelfile([C("model", "m"), C("stop", value), C("system", value)])
    assert parse_modelfile(text) == (C("model", "m"), C("stop", value), C("system", value))
    assert quoted.count("\n") == value.count("\n")


@given(st.lists(_AWKWARD.filter(lambda v: '"' not in v), max_size=5))
@settings(max_examples=100, deadline=None)
def test_stop_strings_without_quotes_always_round_trip(stops: list[str]) -> None:
    out = export_ollama("m:latest", Settings(n_ctx=4096), stop=stops)
    assert settings_from_modelfile(out.modelfile).stop == tuple(stops)


def test_very_long_unicode_stop_round_trips() -> None:
    stop = ("<|im_end|> 日本語 \U0001f600 " * 500).strip() + '"'
    out = export_ollama("m:latest", Settings(n_ctx=4096), stop=[stop, " " + stop])
    assert settings_from_modelfile(out.modelfile).stop == (stop, " " + stop)


_SETTINGS = st.builds(
    Settings,
    n_ctx=st.integers(1, 1 << 20),
    n_gpu_layers=st.one_of(st.just(ALL_LAYERS), st.integers(0, 200)),
    cache_type_k=st.sampled_from(["f16", "q8_0", "q4_0"]),
    flash_attn=st.sampled_from(["on", "auto"]),
    n_parallel=st.integers(1, 16),
    kv_unified=st.booleans(),
    swa_full=st.booleans(),
    n_batch=st.integers(1, 8192),
    n_ubatch=st.integers(1, 8192),
    use_mmap=st.booleans(),
)


@given(_SETTINGS)
@settings(max_examples=200, deadline=None)
def test_settings_round_trip_through_modelfile_and_environment(s: Settings) -> None:
    s = s.replace(cache_type_v=s.cache_type_k)
    if s.n_ctx < s.n_parallel:
        s = s.replace(n_ctx=s.n_parallel)
    out = export_ollama("m:latest", s)
    env = dict(out.env)
    back = settings_from_modelfile(
        out.modelfile,
        num_parallel=int(env["OLLAMA_NUM_PARALLEL"]),
        kv_cache_type=env["OLLAMA_KV_CACHE_TYPE"],
        flash_attention="on" if env.get("OLLAMA_FLASH_ATTENTION") == "1" else "auto",
    )
    assert back.settings == ollama_view(s)
