"""llama-server, llama-cpp-python and LM Studio exports, and the atomic writer.

Exported command lines are parsed back (shlex for POSIX, a PowerShell-rules tokenizer for
PowerShell) and compared with the settings; every flag is checked against the pinned
llama.cpp's common/arg.cpp when its source is on this machine.
"""

from __future__ import annotations

import argparse
import ast
import errno
import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import ExportError
from app.export import common
from app.export.common import ModelFacts, powershell_join, write_text_atomic
from app.export.llama_cpp_python import export_llama_cpp_python, llama_kwargs
from app.export.llama_server import FLAGS, llama_server_argv
from app.export.lmstudio import export_lmstudio, write_lmstudio_config
from app.settings import ALL_LAYERS, CACHE_TYPES, Settings

# --------------------------------------------------------------------------- llama-server


def _server_parser() -> argparse.ArgumentParser:
    """llama-server's flags with arg.cpp's meanings, to read an exported command back."""
    p = argparse.ArgumentParser(prog="llama-server", exit_on_error=False)
    p.add_argument("-m", required=True)
    p.add_argument("-c", type=int)
    p.add_argument("-ngl")
    p.add_argument("--fit")
    p.add_argument("-fa")
    p.add_argument("-ctk")
    p.add_argument("-ctv")
    p.add_argument("-np", type=int)
    p.add_argument("-kvu", dest="kvu", action="store_const", const=True)
    p.add_argument("--no-kv-unified", dest="kvu", action="store_const", const=False)
    p.add_argument("-b", type=int)
    p.add_argument("-ub", type=int)
    p.add_argument("--swa-full", action="store_true")
    p.add_argument("-ncmoe", type=int, default=0)
    p.add_argument("-ts")
    p.add_argument("--load-mode", default="auto")
    p.add_argument("-nkvo", action="store_true")
    p.add_argument("-md")
    p.add_argument("--spec-type")
    return p


def _settings_from_argv(argv: list[str]) -> tuple[str, Settings]:
    assert argv[0] == "llama-server"
    a = _server_parser().parse_args(argv[1:])
    return a.m, Settings(
        n_ctx=a.c,
        n_gpu_layers=ALL_LAYERS if a.ngl == "all" else int(a.ngl),
        cache_type_k=a.ctk,
        cache_type_v=a.ctv,
        flash_attn=a.fa,
        n_parallel=a.np,
        kv_unified=a.kvu,
        swa_full=a.swa_full,
        n_batch=a.b,
        n_ubatch=a.ub,
        n_cpu_moe=a.ncmoe,
        tensor_split=tuple(float(x) for x in a.ts.split(",")) if a.ts else (),
        use_mmap=a.load_mode != "none",
        offload_kqv=not a.nkvo,
    )


_SERVER_SETTINGS = st.builds(
    Settings,
    n_ctx=st.integers(0, 1 << 20),
    n_gpu_layers=st.one_of(st.just(ALL_LAYERS), st.integers(0, 200)),
    cache_type_k=st.sampled_from(CACHE_TYPES),
    cache_type_v=st.sampled_from(CACHE_TYPES),
    flash_attn=st.sampled_from(["on", "off", "auto"]),
    n_parallel=st.integers(1, 64),
    kv_unified=st.booleans(),
    swa_full=st.booleans(),
    n_batch=st.integers(1, 8192),
    n_ubatch=st.integers(1, 8192),
    n_cpu_moe=st.integers(0, 100),
    tensor_split=st.lists(st.sampled_from([0.0, 1.0, 3.0, 0.25, 2.5]), max_size=4).map(tuple),
    use_mmap=st.booleans(),
    offload_kqv=st.booleans(),
)
_PATHS = st.sampled_from(
    ["/m/model.gguf", '/my models/it\'s "x".gguf', "C:\\Users\\me\\m $1,2.gguf", "/m/日本.gguf"]
)


@given(_SERVER_SETTINGS, _PATHS)
@settings(max_examples=200, deadline=None)
def test_llama_server_command_parses_back_to_the_settings(s: Settings, path: str) -> None:
    line = shlex.join(llama_server_argv(path, s))
    model, back = _settings_from_argv(shlex.split(line))
    assert model == path
    assert back == s


def _powershell_split(line: str) -> list[str]:
    """Split a command line by PowerShell's rules for bare words and '…' strings."""
    line = line.removeprefix("& ")
    out: list[str] = []
    i = 0
    quotes = "'\u2018\u2019\u201a\u201b"
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        if line[i] in quotes:
            i += 1
            word = []
            while True:
                if line[i] in quotes:
                    if i + 1 < len(line) and line[i + 1] in quotes:
                        word.append(line[i])
                        i += 2
                        continue
                    i += 1
                    break
                word.append(line[i])
                i += 1
            out.append("".join(word))
        else:
            j = line.find(" ", i)
            j = len(line) if j < 0 else j
            word_s = line[i:j]
            assert not re.search(r"[$`,;@(){}'\"|&<>#]", word_s), f"unsafe bare word {word_s}"
            out.append(word_s)
            i = j
    return out


@given(_SERVER_SETTINGS, _PATHS)
@settings(max_examples=100, deadline=None)
def test_powershell_command_parses_back_to_the_settings(s: Settings, path: str) -> None:
    argv = llama_server_argv(path, s)
    assert _powershell_split(powershell_join(argv)) == list(argv)


def test_powershell_quotes_smart_quotes_and_commas() -> None:
    assert powershell_join(["llama-server", "-ts", "3,1", "-m", "a\u2019b c"]) == (
        "llama-server -ts '3,1' -m 'a\u2019\u2019b c'"
    )
    assert powershell_join(["C:\\Program Files\\x.exe", "-c", "1"]).startswith("& 'C:")


def test_draft_model_runs_with_a_speculative_type() -> None:
    argv = llama_server_argv("/m.gguf", Settings(), draft_path="/d.gguf")
    assert argv[-4:] == ("-md", "/d.gguf", "--spec-type", "draft-simple")


def test_every_flag_exists_in_the_pinned_llama_cpp(llama_cpp_source: Path) -> None:
    arg_cpp = llama_cpp_source / "vendor" / "llama.cpp" / "common" / "arg.cpp"
    source = arg_cpp.read_text(encoding="utf-8")
    declared = set(re.findall(r'"(-{1,2}[a-z][a-z0-9-]*)"', source))
    missing = [f for f in FLAGS if f not in declared]
    assert not missing, f"not in {arg_cpp}: {missing}"
    assert "--no-mmap" not in declared  # replaced by --load-mode (PR #20834)
    assert '"draft-simple"' in (arg_cpp.parent / "speculative.cpp").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- llama-cpp-python


def test_llama_cpp_python_snippet_is_valid_python_with_the_settings() -> None:
    s = Settings(
        n_ctx=8192,
        n_gpu_layers=10,
        cache_type_k="q8_0",
        cache_type_v="q4_0",
        flash_attn="on",
        n_batch=1024,
        n_ubatch=256,
        swa_full=False,
        tensor_split=(3.0, 1.0),
        use_mmap=False,
    )
    text = export_llama_cpp_python("/m/it's.gguf", s).text
    call = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call))
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert kwargs == {
        "model_path": "/m/it's.gguf",
        "n_ctx": 8192,
        "n_gpu_layers": 10,
        "n_batch": 1024,
        "n_ubatch": 256,
        "flash_attn": True,
        "type_k": 8,  # GGML_TYPE_Q8_0 in llama_cpp.py
        "type_v": 2,  # GGML_TYPE_Q4_0
        "swa_full": False,
        "offload_kqv": True,
        "use_mmap": False,
        "tensor_split": [3.0, 1.0],
    }


def test_llama_cpp_python_says_it_cannot_run_parallel_slots() -> None:
    _, notes = llama_kwargs("/m.gguf", Settings(n_parallel=4, kv_unified=True))
    assert any("n_seq_max" in n for n in notes)


def test_llama_cpp_python_kwargs_exist_in_the_pinned_version(llama_cpp_source: Path) -> None:
    llama_py = llama_cpp_source / "llama_cpp" / "llama.py"
    src = llama_py.read_text(encoding="utf-8")
    init = next(
        n
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.FunctionDef) and n.name == "__init__"
    )
    names = {a.arg for a in init.args.args + init.args.kwonlyargs}
    kwargs, _ = llama_kwargs("/m.gguf", Settings(tensor_split=(1.0,)))
    assert set(kwargs) <= names
    assert "n_seq_max" not in names
    assert "kv_unified" not in names


# --------------------------------------------------------------------------- LM Studio


def _facts(n_layer: int = 24) -> ModelFacts:
    return ModelFacts(path="/x", name=None, n_layer_all=n_layer, n_ctx_train=32768)


def test_lmstudio_fields_and_config_path(tmp_path: Path) -> None:
    home = tmp_path / ".lmstudio"
    model = home / "models" / "pub" / "repo" / "m-Q4_K_M.gguf"
    s = Settings(
        n_ctx=8192,
        n_gpu_layers=12,
        cache_type_k="q8_0",
        cache_type_v="q8_0",
        flash_attn="on",
        n_parallel=2,
        kv_unified=True,
    )
    out = export_lmstudio(model, s, facts=_facts(), lmstudio_home=home)
    fields = dict(out.fields)
    assert fields["llm.load.contextLength"] == 8192
    assert fields["llm.load.llama.acceleration.offloadRatio"] == 0.5
    assert fields["llm.load.numParallelSessions"] == 2
    assert fields["llm.load.useUnifiedKvCache"] is True
    assert fields["llm.load.llama.kCacheQuantizationType"] == {"checked": True, "value": "q8_0"}
    assert out.config_path == (
        home
        / ".internal"
        / "user-concrete-model-default-config"
        / "pub"
        / "repo"
        / "m-Q4_K_M.gguf.json"
    )
    assert json.loads(out.config_json) == {
        "load": {"fields": [{"key": k, "value": v} for k, v in out.fields]}
    }
    assert shlex.split(shlex.join(out.lms_load)) == [
        "lms",
        "load",
        "pub/repo/m-Q4_K_M.gguf",
        "--gpu",
        "0.5",
        "-c",
        "8192",
        "--parallel",
        "2",
    ]
    compile(out.sdk_snippet, "snippet", "exec")


def test_lmstudio_refuses_bf16_kv() -> None:
    with pytest.raises(ExportError, match="LM Studio's KV cache types"):
        export_lmstudio("/m.gguf", Settings(cache_type_k="bf16"), facts=_facts())


def test_lmstudio_config_written_only_when_asked_with_backup(tmp_path: Path) -> None:
    home = tmp_path / ".lmstudio"
    model = home / "models" / "pub" / "repo" / "m.gguf"
    out = export_lmstudio(model, Settings(n_ctx=4096), facts=_facts(), lmstudio_home=home)
    assert out.config_path is not None
    assert not out.config_path.exists()  # exporting writes nothing
    path = write_lmstudio_config(out)
    assert json.loads(path.read_text()) == json.loads(out.config_json)
    # the user's own fields survive; ours replace theirs; the old file is backed up
    old = {
        "load": {
            "fields": [
                {"key": "llm.load.contextLength", "value": 2048},
                {"key": "llm.load.llama.keepModelInMemory", "value": False},
            ]
        },
        "other": 1,
    }
    path.write_text(json.dumps(old))
    with pytest.raises(ExportError, match="already exists"):
        write_lmstudio_config(out)
    write_lmstudio_config(out, overwrite=True)
    new = json.loads(path.read_text())
    assert new["other"] == 1
    keys = [f["key"] for f in new["load"]["fields"]]
    assert keys.count("llm.load.contextLength") == 1
    assert {"key": "llm.load.llama.keepModelInMemory", "value": False} in new["load"]["fields"]
    backups = list(path.parent.glob("m.gguf.json.*.bak"))
    assert len(backups) == 1
    assert json.loads(backups[0].read_text()) == old


def test_lmstudio_model_outside_its_folder_cannot_be_written(tmp_path: Path) -> None:
    out = export_lmstudio(tmp_path / "m.gguf", Settings(), facts=_facts(), lmstudio_home=tmp_path)
    assert out.config_path is None
    with pytest.raises(ExportError, match="lms import"):
        write_lmstudio_config(out)


# --------------------------------------------------------------------------- atomic writes


def test_write_refuses_to_overwrite_unless_asked(tmp_path: Path) -> None:
    target = tmp_path / "Modelfile"
    write_text_atomic(target, "one\n")
    with pytest.raises(ExportError, match="already exists"):
        write_text_atomic(target, "two\n")
    assert target.read_text() == "one\n"
    write_text_atomic(target, "two\n", overwrite=True)
    assert target.read_text() == "two\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Modelfile"]


def test_write_into_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="does not exist"):
        write_text_atomic(tmp_path / "no" / "Modelfile", "x")


def test_disk_full_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def full_disk(fd: int, data: object) -> int:
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return 10  # a short write first, as a nearly full disk does

    monkeypatch.setattr(common.os, "write", full_disk)
    with pytest.raises(ExportError, match="disk is full"):
        write_text_atomic(tmp_path / "Modelfile", "x" * 100)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_file_size_limit_in_a_real_process_leaves_no_file(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        from app.export.common import write_text_atomic
        from app.errors import ExportError
        try:
            write_text_atomic({str(tmp_path / "big.txt")!r}, "x" * 100_000)
        except ExportError as err:
            print(err)
            sys.exit(3)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 3, proc.stderr
    assert "file size limit" in proc.stdout
    assert list(tmp_path.iterdir()) == []
