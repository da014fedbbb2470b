"""ggml's tensor types, GGUF's value types and llama.cpp's file types, as plain tables.

Ids and sizes are the vendored llama.cpp's (docs/engine.md has the commit):
``ggml/include/ggml.h`` ``enum ggml_type`` and the ``blck_size``/``type_size`` of
``type_traits`` in ``ggml/src/ggml.c``; ``ggml/include/gguf.h`` ``enum gguf_type``;
``include/llama.h`` ``enum llama_ftype``. gguf-py carries the same tables
(``gguf.constants``), but importing any of gguf imports numpy (a fifth of a second before a
command can start), and gguf-py 0.19 does not know every type the pinned ggml does (Q2_0).
The names are gguf-py's; tests/app/test_ggml.py checks that both agree on every type
gguf-py knows.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final


@dataclass(frozen=True, slots=True)
class GgmlType:
    """A ggml tensor type: ``block_size`` elements take ``type_size`` bytes."""

    id: int
    name: str
    block_size: int
    type_size: int

    @property
    def is_quantized(self) -> bool:
        """Return ``ggml_is_quantized`` (every block type; f32/f16/bf16/ints are not)."""
        return self.block_size > 1

    def row_bytes(self, n_per_row: int) -> int:
        """Return ``ggml_row_size``: bytes of one row of ``n_per_row`` elements."""
        assert n_per_row % self.block_size == 0, f"{n_per_row} not a multiple of {self.name}"
        return self.type_size * (n_per_row // self.block_size)


def _types(*rows: tuple[int, str, int, int]) -> dict[int, GgmlType]:
    return {r[0]: GgmlType(*r) for r in rows}


GGML_TYPES: Final = _types(
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
    (42, "Q2_0", 64, 18),
)
"""Every ggml type of the vendored ggml (``type_traits`` in ``ggml/src/ggml.c``)."""


GGML_TYPE_IDS: Final[dict[str, int]] = {t.name.lower(): t.id for t in GGML_TYPES.values()}
"""Each type's id by its lower-case name, as llama.cpp's flags spell it (``-ctk q8_0``)."""


class GGMLQuantizationType(IntEnum):
    """``enum ggml_type``: the id of each tensor type (named as gguf-py names them)."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41
    Q2_0 = 42


GGML_QUANT_SIZES: Final[dict[GGMLQuantizationType, tuple[int, int]]] = {
    GGMLQuantizationType(t.id): (t.block_size, t.type_size) for t in GGML_TYPES.values()
}
"""(elements per block, bytes per block) of each type, as gguf-py's table of that name."""


class GGUFValueType(IntEnum):
    """``enum gguf_type``: the type code of a metadata value."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


class LlamaFileType(IntEnum):
    """``enum llama_ftype`` (include/llama.h), named as ``llama-quantize`` takes them (gguf-py
    adds ``MOSTLY_``); the value of ``general.file_type``."""

    ALL_F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q8_0 = 7
    Q5_0 = 8
    Q5_1 = 9
    Q2_K = 10
    Q3_K_S = 11
    Q3_K_M = 12
    Q3_K_L = 13
    Q4_K_S = 14
    Q4_K_M = 15
    Q5_K_S = 16
    Q5_K_M = 17
    Q6_K = 18
    IQ2_XXS = 19
    IQ2_XS = 20
    Q2_K_S = 21
    IQ3_XS = 22
    IQ3_XXS = 23
    IQ1_S = 24
    IQ4_NL = 25
    IQ3_S = 26
    IQ3_M = 27
    IQ2_S = 28
    IQ2_M = 29
    IQ4_XS = 30
    IQ1_M = 31
    BF16 = 32
    TQ1_0 = 36
    TQ2_0 = 37
    MXFP4_MOE = 38
    NVFP4 = 39  # in llama.h, not offered by llama-quantize
    Q1_0 = 40
    Q2_0 = 41
