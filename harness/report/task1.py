"""Section 2 of the report, Task 1: transformers (serial and static batching) against vLLM offline,
its table and the numbers its analysis questions ask for (speed-up, KV peaks, padding, the pool
vLLM reserves).
"""

from __future__ import annotations

from typing import Any

from harness.document import Block, bullets, heading, para, table
from harness.results import Results, provenance_line, task1_table
from harness.rules import ratio
from harness.report.text import factor, mib, no_results, tok_s


def task1_facts(results: dict[str, Any]) -> list[str]:
    """The numbers behind Task 1's questions: speed-up, KV peaks, padding, reserved pool."""
    methods = results["methods"]
    serial, static, vllm = (methods.get(k) for k in ("hf-serial", "hf-static", "vllm"))
    facts = []
    if vllm and serial:
        facts.append(f"Continuous batching in paged memory: vLLM is {factor(ratio(serial['total_s'], vllm['total_s']))} "
                     f"faster than serial generation ({tok_s(vllm['output_tokens_per_s'])} against "
                     f"{tok_s(serial['output_tokens_per_s'])})" + (
                         f" and {factor(ratio(static['total_s'], vllm['total_s']))} faster than static batching"
                         if static else "") + ".")
    if static:
        pad = static["padding"]
        facts.append(f"Static batching (batch {static['batch_size']}) pads every prompt to the "
                     f"longest in its batch: of the {pad['held_token_slots']} KV token slots it holds, "
                     f"{pad['padding_slots']} ({pad['padding_share']:.1%}) are padding and "
                     f"{pad['real_tokens']} hold real tokens; its KV peak (B x L x bytes/token) is "
                     f"{mib(static['kv_peak_bytes'])}.")
        if static.get("oom_search") and all(s.get("fits") for s in static["oom_search"]):
            facts.append(f"The requested batch of {static['requested_batch_size']} fit on this GPU "
                         "(no OOM): the OOM question is answered from the padding arithmetic.")
    if vllm:
        kv_token = results["config"].get("kv_bytes_per_token")
        line = ("vLLM's measured KV peak (largest sum of computed tokens over all steps) is "
                f"{mib(vllm['kv_peak_bytes'])}")
        if kv_token and static:
            used = vllm["kv_peak_bytes"] / kv_token
            line += f", {used:.0f} tokens, {used / static['padding']['real_tokens']:.1%} of the real tokens"
        if "kv_peak_allocated_bytes" in vllm:
            line += (f"; its allocated blocks peak at {mib(vllm['kv_peak_allocated_bytes'])} "
                     f"({1 - vllm['kv_peak_bytes'] / vllm['kv_peak_allocated_bytes']:.1%} unused: "
                     "the tail of each request's last block)")
        facts.append(line + ".")
        if static:
            facts.append(f"KV peak, static batching vs vLLM: "
                         f"{factor(ratio(static['kv_peak_bytes'], vllm['kv_peak_bytes']))}.")
        if vllm.get("kv_capacity_bytes"):
            facts.append(f"vLLM's 'peak GPU memory' is the pool it reserves up front "
                         f"(gpu_memory_utilization {vllm.get('engine', {}).get('gpu_memory_utilization')}): "
                         f"{vllm['kv_capacity_tokens']} tokens ({vllm['kv_capacity_bytes'] / 2**30:.1f} GiB), "
                         f"of which this run used {vllm['kv_peak_bytes'] / vllm['kv_capacity_bytes']:.1%}.")
    return facts


def task1_section(res: Results) -> list[Block]:
    blocks = [heading("2 Task 1: transformers vs vLLM offline")]
    if not res.task1:
        return blocks + [no_results("Task 1", "task1.json", "python task1_vllm_vs_hf.py")]
    cfg = res.task1["config"]
    metas = [m.get("meta") for m in res.task1["methods"].values()]
    fixed = " (fixed output length)" if cfg.get("fixed_output_len") else ""
    return blocks + [para(f"{cfg['num_prompts']} prompts, {cfg['max_new_tokens']} new tokens each{fixed}, "
                          f"{cfg['dtype']}, KV bytes per token {cfg['kv_bytes_per_token']}. {provenance_line(metas)}."),
                     table(task1_table(res.task1)), heading("Numbers for the analysis questions", 3),
                     bullets(task1_facts(res.task1))]
