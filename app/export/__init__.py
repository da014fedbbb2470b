"""Write ggtune's settings in the format each runner reads.

Every exporter is a pure function from a model and :class:`~app.settings.Settings` to
text (:mod:`app.export.ollama`, :mod:`app.export.lmstudio`, :mod:`app.export.llama_server`,
:mod:`app.export.llama_cpp_python`); writing to disk is separate
(:func:`~app.export.common.write_text_atomic`): atomic, never over a user's file unless
asked, and a full disk leaves nothing behind. Where a runner cannot express a setting the
export says so in ``notes``, or raises :class:`~app.errors.ExportError` when the result
would not run at all.
"""

from __future__ import annotations

from app.export.common import ExportText, ModelFacts, model_facts, write_text_atomic

__all__ = ["ExportText", "ModelFacts", "model_facts", "write_text_atomic"]
