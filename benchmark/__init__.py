"""The benchmark suite: serving sweeps and soaks of plain, always-on and gated SGLang servers.

Imports go one way, from the top down (benchmark/README.md, "Layout"; test_benchmark_layout.py
checks it):

    client    the load: prompts, SGLang's benchmark client, probes, and the sweep and soak
      |         that drive servers with it
    analysis  tables, verdicts and profiles from what a run wrote
      |
    servers   start, stop and ask SGLang servers; the host they run on; a run's record

``pairs`` (the generated model pair and its FlashInfer kernels), ``cli`` and ``results_index``
import no other part of it. The scripts beside this file are the commands' entry points.
"""
