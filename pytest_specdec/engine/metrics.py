"""Prometheus metrics under SGLang's names, so dashboards and scrapers need no second mapping.

Gauges are set by the scheduler every ``--decode-log-interval`` decode steps (like SGLang's);
counters and histograms are updated as requests run. Each engine owns its registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)


class EngineMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        self.labels = {"model_name": model_name}
        names = list(self.labels)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=self.registry).labels(**self.labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=self.registry).labels(**self.labels)

        def histogram(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, names, buckets=_LATENCY_BUCKETS,
                             registry=self.registry).labels(**self.labels)

        self.num_running_reqs = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.num_queue_reqs = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.num_used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.spec_accept_length = gauge(
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).")
        self.spec_accept_rate = gauge(
            "sglang:spec_accept_rate", "Speculative acceptance rate (accepted drafts / proposed drafts).")
        self.spec_num_draft_tokens = gauge(
            "sglang:spec_num_draft_tokens", "Draft tokens per verify, root included (0 without speculation).")
        self.prompt_tokens = counter("sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("sglang:generation_tokens", "Number of generation tokens processed.")
        self.num_requests = counter("sglang:num_requests", "Number of requests processed.")
        self.num_aborted_requests = counter("sglang:num_aborted_requests", "Number of requests aborted.")
        self.spec_verify_calls = counter("sglang:spec_verify_calls", "Number of speculative verify calls.")
        self.time_to_first_token = histogram("sglang:time_to_first_token_seconds",
                                             "Histogram of time to first token in seconds.")
        self.inter_token_latency = histogram("sglang:inter_token_latency_seconds",
                                             "Histogram of inter-token latency in seconds.")
        self.e2e_request_latency = histogram("sglang:e2e_request_latency_seconds",
                                             "Histogram of End-to-end request latency in seconds")

    def render(self) -> bytes:
        return generate_latest(self.registry)
