"""The load generator, the benchmarks and the profiling tools, run as modules from the
repository root (`python -m loadtest.bench_embedded --smoke`); they import each other as
`loadtest.NAME` and streamdet, and nothing from tests/."""
