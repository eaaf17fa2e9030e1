"""The lab's supporting modules: the results layer (``results``) and the report (``report``).
The handout's deliverables (``task1_vllm_vs_hf.py``, ``task2.sh``, ``task3.sh``,
``my_scheduler.py``, ``plot_results.py``) stay at the top level and import from here."""
