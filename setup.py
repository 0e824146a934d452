"""Builds the Cython kernels in reasearch/native/ (every ``*.pyx`` there is one extension) and the
engine's one C extension, the worker's zygote (reasearch/engine/_zygote.c)."""

from __future__ import annotations

from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent
extensions = [
    Extension(
        f"reasearch.native.{pyx.stem}",
        [str(pyx.relative_to(HERE))],
        include_dirs=[numpy.get_include(), "reasearch/native/include"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
        depends=[str(h.relative_to(HERE)) for h in sorted((HERE / "reasearch" / "native" / "include").glob("*.h"))],
    )
    for pyx in sorted((HERE / "reasearch" / "native").glob("*.pyx"))
]

zygote = Extension("reasearch.engine._zygote", ["reasearch/engine/_zygote.c"], extra_compile_args=["-O2"])

setup(
    ext_modules=[
        *cythonize(
            extensions,
            language_level=3,
            compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
        ),
        zygote,
    ],
)
