"""The error tree: every error in app/errors.py, picklable, and one base for a path."""

from __future__ import annotations

import ast
import builtins
import inspect
import pickle
from pathlib import Path

import pytest

import app.errors as errors
from app.errors import GGTuneError, GGUFError, PathError

ROOT = Path(__file__).resolve().parents[2]

SAMPLES: dict[str, object] = {
    "path": "/models/broken.gguf",
    "offset": 1234,
    "message": "truncated inside the tensor infos",
    "cause": "llama.cpp aborted (SIGABRT) while loading the model",
    "url": "https://huggingface.co/org/m/resolve/main/m.gguf",
    "status": 503,
    "retry_after_s": 2.5,
    "log_tail": ("llama_model_load: error", "stderr line"),
    "exit_code": 3,
    "signal": 6,
}


def _every_error() -> list[type[GGTuneError]]:
    found = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, GGTuneError)
    ]
    assert len(found) > 30
    return found


def _example(cls: type[GGTuneError]) -> GGTuneError:
    """Build ``cls`` with every parameter of its constructor filled in."""
    try:
        params = inspect.signature(cls).parameters
    except ValueError:  # Exception's own constructor: the message alone
        return cls(SAMPLES["message"])
    args, kwargs = [], {}
    for name, param in params.items():
        value = SAMPLES[name] if name in SAMPLES else SAMPLES["message"]
        if param.kind is param.KEYWORD_ONLY:
            kwargs[name] = value
        else:
            args.append(value)
    return cls(*args, **kwargs)


@pytest.mark.parametrize("cls", _every_error(), ids=lambda c: c.__name__)
def test_every_error_survives_pickling_with_its_fields(cls: type[GGTuneError]) -> None:
    err = _example(cls)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert str(back) == str(err)
    assert back.args == err.args
    assert vars(back) == vars(err)


@pytest.mark.parametrize("cls", _every_error(), ids=lambda c: c.__name__)
def test_an_error_with_a_path_is_a_path_error(cls: type[GGTuneError]) -> None:
    err = _example(cls)
    assert ("path" in vars(err)) == isinstance(err, PathError)
    if isinstance(err, PathError):
        assert err.path == SAMPLES["path"]
        assert str(err).startswith(f"{SAMPLES['path']}: ")
        assert err.message == SAMPLES["message"]


def test_a_path_error_without_a_file_is_its_message_alone() -> None:
    err = errors.HardwareProfileError("2x rtx-9999: no such profile")
    assert (err.path, str(err)) == (None, "2x rtx-9999: no such profile")


def test_a_gguf_error_keeps_the_byte_in_its_detail_and_tells_the_user_plainly() -> None:
    err = GGUFError("m.gguf", 24, "bad magic")
    assert (str(err), err.offset, err.message) == ("m.gguf: bad magic", 24, "bad magic")
    assert err.detail == "at byte 24: bad magic"
    assert GGUFError("m.gguf", None, "bad magic").detail == "bad magic"
    torn = errors.TruncatedError("m.gguf", 1234, "file ends at byte 1240 inside a tensor info")
    assert str(torn) == f"m.gguf: {errors.TruncatedError.summary}"
    assert "byte" not in str(torn)
    assert torn.detail == "at byte 1234: file ends at byte 1240 inside a tensor info"


def test_every_ggtune_error_is_defined_in_app_errors() -> None:
    names = {cls.__name__ for cls in _every_error()}
    outside = []
    for source in (ROOT / folder for folder in ("app", "runner", "ui")):
        for path in source.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if path.relative_to(ROOT).as_posix() == "app/errors.py":
                    break
                if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id in names for b in node.bases
                ):
                    outside.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert outside == []


def _outside_examples() -> dict[str, BaseException | None]:
    """One example of each public exception that is not a GGTuneError (not shown to the user
    as an error line: a probe's reason, a child's typed failure, a tool not built, a read the
    user cancelled); None for one whose module needs PySide6 where it is not installed (the
    headless leg), which is then only checked to be listed."""
    from app.hardware.report import ProbeUnavailable
    from runner.llama_tools import LlamaToolMissing
    from runner.worker import ChildFailure

    examples: dict[str, BaseException | None] = {
        "app/hardware/report.py:ProbeUnavailable": ProbeUnavailable("nvidia-smi not found"),
        "runner/worker.py:ChildFailure": ChildFailure("no model", error=errors.EngineLoadError),
        "runner/llama_tools.py:LlamaToolMissing": LlamaToolMissing("not built", tool="rpc-server"),
    }
    try:
        from ui.desktop.hub.rows import ReadCancelled
    except ImportError:  # no PySide6
        examples["ui/desktop/hub/rows.py:ReadCancelled"] = None
    else:
        examples["ui/desktop/hub/rows.py:ReadCancelled"] = ReadCancelled("ggtune-test/demo-GGUF")
    return examples


def test_every_public_exception_outside_the_tree_survives_pickling_too() -> None:
    builtin = {
        name
        for name, value in vars(builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    tree = {cls.__name__ for cls in _every_error()} | {"GGTuneError"}
    found = set()
    for folder in ("app", "runner", "ui"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.ClassDef)
                    and not node.name.startswith("_")
                    and node.name not in tree
                    and any(isinstance(b, ast.Name) and b.id in builtin for b in node.bases)
                ):
                    found.add(f"{path.relative_to(ROOT).as_posix()}:{node.name}")
    examples = _outside_examples()
    assert found == set(examples)  # a new one: add an example here
    for err in examples.values():
        if err is None:
            continue
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err)
        assert str(back) == str(err)
        assert vars(back) == vars(err)
