"""Prometheus metrics under SGLang's names and labels, so dashboards and scrapers need no second
mapping.

SGLang has two collectors: its scheduler's gauges (labels: model, engine type and the ranks), set
every ``--decode-log-interval`` decode steps, and its tokenizer's counters and histograms (labels:
model and engine type, some also ``is_streaming``). The tokenizer counts a request's prompt,
generated tokens and verify steps once, when the request finishes, so a scrape mid-request sees
none of it yet; the engine counts them at the same point. Each engine owns its registry.
"""

from __future__ import annotations

import gzip

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder, gzip_accepted

_LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
#: SGLang's engine type of a server that neither prefills nor decodes for another (no PD split)
ENGINE_TYPE = "unified"
STREAMING = "is_streaming"


class EngineMetrics:
    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        tokenizer = {"model_name": model_name, "engine_type": ENGINE_TYPE}
        scheduler = {**tokenizer, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        self.labels = tokenizer

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, list(scheduler), registry=self.registry).labels(**scheduler)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, list(tokenizer), registry=self.registry).labels(**tokenizer)

        def histogram(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, list(tokenizer), buckets=_LATENCY_BUCKETS,
                             registry=self.registry).labels(**tokenizer)

        def by_streaming(kind, name: str, doc: str, **kw) -> dict[bool, Counter | Histogram]:
            family = kind(name, doc, [*tokenizer, STREAMING], registry=self.registry, **kw)
            return {s: family.labels(**tokenizer, **{STREAMING: "true" if s else "false"}) for s in (False, True)}

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
        self.prompt_tokens = by_streaming(Counter, "sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = by_streaming(Counter, "sglang:generation_tokens",
                                              "Number of generation tokens processed.")
        self.num_requests = by_streaming(Counter, "sglang:num_requests", "Number of requests processed.")
        self.num_aborted_requests = counter("sglang:num_aborted_requests", "Number of requests aborted.")
        self.spec_verify_calls = counter("sglang:spec_verify_calls",
                                         "Number of speculative decoding verification calls.")
        self.time_to_first_token = by_streaming(Histogram, "sglang:time_to_first_token_seconds",
                                                "Histogram of time to first token in seconds.",
                                                buckets=_LATENCY_BUCKETS)
        self.inter_token_latency = histogram("sglang:inter_token_latency_seconds",
                                             "Histogram of inter-token latency in seconds.")
        self.e2e_request_latency = by_streaming(Histogram, "sglang:e2e_request_latency_seconds",
                                                "Histogram of End-to-end request latency in seconds",
                                                buckets=_LATENCY_BUCKETS)

    def finished(self, *, stream: bool, prompt_tokens: int, completion_tokens: int, verify_ct: int,
                 e2e_latency: float | None) -> None:
        """A client request's counts, taken when it finishes, as SGLang's tokenizer takes them."""
        self.prompt_tokens[stream].inc(prompt_tokens)
        self.generation_tokens[stream].inc(completion_tokens)
        if verify_ct > 0:
            self.spec_verify_calls.inc(verify_ct)
        self.num_requests[stream].inc()
        if e2e_latency is not None:
            self.e2e_request_latency[stream].observe(e2e_latency)

    def exposition(self, accept: str, accept_encoding: str, names: list[str]) -> tuple[bytes, dict[str, str]]:
        """The body and headers Prometheus' ASGI app (SGLang's /metrics) answers a scrape with:
        OpenMetrics where Accept asks for it, gzip where Accept-Encoding takes it, and only the
        metrics ``names`` (the query's ``name[]``) where given."""
        encode, content_type = choose_encoder(accept)
        body = encode(self.registry.restricted_registry(names) if names else self.registry)
        if gzip_accepted(accept_encoding):
            return gzip.compress(body), {"Content-Type": content_type, "Content-Encoding": "gzip"}
        return body, {"Content-Type": content_type}
