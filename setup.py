"""The compiled kernels of the engine (Cython), built by `pip install .` and `pip install -e .`:
everything else is in pyproject.toml."""

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

KERNELS = ["streamdet.engine.greedy", "streamdet.engine.grouping",
           "streamdet.engine.markup_scan", "streamdet.engine.minhash",
           "streamdet.engine.pair_kernels", "streamdet.state.bloom_kernels",
           "streamdet.state.gram_table"]

setup(ext_modules=cythonize(
    [Extension(name, [name.replace(".", "/") + ".pyx"], include_dirs=[numpy.get_include()],
               extra_compile_args=["-O3"]) for name in KERNELS],
    compiler_directives={"language_level": 3}))
