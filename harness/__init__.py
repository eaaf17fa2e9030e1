"""The lab's supporting modules, one package: the sweeps (``sweep``) and the harness that runs one
server configuration (``serve_bench``, with the server process in ``server``, the benchmark
clients in ``bench_client`` and the result record in ``run_record``), the strategy registry
without vLLM (``strategies``), what the host's processes and GPU do meanwhile
(``host_monitor``), the metrics and the front-end check (``lab_metrics``), provenance
(``provenance``), the offline model files (``offline_model``), the in-process scheduler driver
(``sched_engine``), the replay simulator (``sched_sim``, ``step_model``, ``replay_study``), the
scheduler benchmark (``sched_bench``), the results layer (``results``), the rules behind each
conclusion (``rules``), and the report that words them (``report``, rendered by ``document``). The handout's deliverables (``task1_vllm_vs_hf.py``,
``task2.sh``, ``task3.sh``, ``my_scheduler.py``, ``plot_results.py``) stay at the top level."""
