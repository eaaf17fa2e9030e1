"""The lab's supporting modules: the results layer (``results``), the report's content
(``report``) and its rendering (``document``). The handout's deliverables (``task1_vllm_vs_hf.py``,
``task2.sh``, ``task3.sh``, ``my_scheduler.py``, ``plot_results.py``) stay at the top level."""
