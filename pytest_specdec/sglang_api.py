"""Every SGLang name the plugin relies on, in one place: endpoints, the request fields it sends,
the response and /server_info keys it reads, the Prometheus metrics it parses and the log lines
it treats as readiness or as fatal.

A renamed field in SGLang would otherwise turn into a silent zero or a missed crash, so
tests/unit/test_sglang_contract.py checks each name here against SGLang's own source (the
versions in the README's table). The plugin's modules import these names; the embedded engine
serves them.
"""

from __future__ import annotations

# -- endpoints -------------------------------------------------------------------------------------
GENERATE = "/generate"
HEALTH = "/health"  # liveness: SGLang generates one token to answer it
HEALTH_GENERATE = "/health_generate"  # readiness: 503 until warm-up is done
SERVER_INFO = "/server_info"
SERVER_INFO_OLD = "/get_server_info"  # the name before the rename, still served
MODELS = "/v1/models"
MODEL_INFO = "/model_info"
METRICS = "/metrics"  # served with --enable-metrics
TOKENIZE = "/v1/tokenize"  # since 0.5.3.post1; a release before it answers 404
TOKENIZE_ALIAS = "/tokenize"  # the same handler, left out of the OpenAPI schema
#: GET: the live load of each DP rank, {"loads": [{dp_rank, num_running_reqs, num_waiting_reqs, ...}]}
#: (`include=core`: those counts alone), from snapshots the scheduler publishes on every prefill and
#: on going idle (throttled in between)
LOADS = "/v1/loads"
LOADS_CORE = "core"  # the `include` section of the counts alone
LOADS_LIST = "loads"
LOAD_DP_RANK = "dp_rank"
LOAD_RUNNING = "num_running_reqs"
LOAD_WAITING = "num_waiting_reqs"
#: GET: the releases before /v1/loads: a list per DP rank of {dp_rank, num_reqs (running and
#: waiting), num_waiting_reqs, ...}; later a deprecated shim of /v1/loads, gone by 0.5.23
LOADS_OLD = "/get_load"
LOAD_OLD_REQS = "num_reqs"
#: POST: drops the prefix cache and resets the lifetime speculative counters; answered only while
#: no request is queued or running (200), else refused (400 "Flush cache failed.")
FLUSH_CACHE = "/flush_cache"

# -- /generate: what the client sends ----------------------------------------------------------------
REQUEST_FIELDS_SENT = ("text", "sampling_params", "stream")
SAMPLING_PARAMS_SENT = ("max_new_tokens", "temperature", "ignore_eos")
#: Sent by the losslessness reference alone: its output tokens' top logprobs (logprob_start_len
#: left at SGLang's default, -1: output tokens only), so a divergence can say how close its choice was.
RETURN_LOGPROB = "return_logprob"
TOP_LOGPROBS_NUM = "top_logprobs_num"

# -- /generate: what the client reads ----------------------------------------------------------------
RESPONSE_TEXT = "text"  # the output so far (cumulative unless the server streams deltas)
RESPONSE_OUTPUT_IDS = "output_ids"  # its token ids, likewise (the losslessness guard's input)
META_INFO = "meta_info"
#: A stream of several sequences (n above 1, a batch) tags each event with its sequence, after meta_info
RESPONSE_INDEX = "index"
FINISH_REASON = "finish_reason"  # {"type": ..., "message"?: ...}
FINISH_TYPE = "type"
FINISH_MESSAGE = "message"
FINISH_ABORT = "abort"  # the finish type of a request the server gave up on
PROMPT_TOKENS = "prompt_tokens"
COMPLETION_TOKENS = "completion_tokens"
E2E_LATENCY = "e2e_latency"
SPEC_VERIFY_CT = "spec_verify_ct"
SPEC_ACCEPT_LENGTH = "spec_accept_length"
SPEC_ACCEPT_RATE = "spec_accept_rate"
SPEC_NUM_CORRECT_DRAFTS = "spec_num_correct_drafts"
SPEC_NUM_PROPOSED_DRAFTS = "spec_num_proposed_drafts"
#: Added only when a request went through at least one verify step: absent, not zero, otherwise.
SPEC_META_KEYS = (SPEC_VERIFY_CT, SPEC_ACCEPT_LENGTH, SPEC_ACCEPT_RATE, SPEC_NUM_CORRECT_DRAFTS,
                  SPEC_NUM_PROPOSED_DRAFTS)
#: Per output token, the top `top_logprobs_num` as [logprob, token id, text or null], best first.
OUTPUT_TOP_LOGPROBS = "output_top_logprobs"
META_INFO_KEYS_READ = (FINISH_REASON, PROMPT_TOKENS, COMPLETION_TOKENS, E2E_LATENCY, *SPEC_META_KEYS,
                       OUTPUT_TOP_LOGPROBS)

# -- /v1/tokenize: the context-length guard's count ------------------------------------------------
#: {"prompt": str | [str, ...], "add_special_tokens": bool}; the special tokens default to added, as
#: /generate adds them, so the count is the prompt_tokens a request of that text would have
TOKENIZE_PROMPT = "prompt"
TOKENIZE_ADD_SPECIAL_TOKENS = "add_special_tokens"
#: {"tokens": ids | [ids, ...], "count": int | [int, ...], "max_model_len": int}, a list for a list
TOKENIZE_COUNT = "count"
TOKENIZE_TOKENS = "tokens"
TOKENIZE_MAX_MODEL_LEN = "max_model_len"
#: A server started with --skip-tokenizer-init serves /v1/tokenize with no tokenizer behind it: the
#: handler calls encode on None and answers HTTP 500 {"object": "error", "type": "InternalServerError",
#: "message": TOKENIZE_FAILED + ": " + TOKENIZE_NO_TOKENIZER}
TOKENIZE_FAILED = "Internal server error during tokenization"
TOKENIZE_NO_TOKENIZER = "'NoneType' object has no attribute 'encode'"
SKIP_TOKENIZER_INIT_FLAG = "--skip-tokenizer-init"

# -- /server_info and /v1/models: what the plugin reads ---------------------------------------------
INFO_SPECULATIVE_ALGORITHM = "speculative_algorithm"
INFO_NUM_DRAFT_TOKENS = "speculative_num_draft_tokens"
INFO_TP_SIZE = "tp_size"
INFO_MODEL_PATH = "model_path"  # also /model_info's, which follows a weight update
INFO_SERVED_MODEL_NAME = "served_model_name"  # also /model_info's
INFO_DRAFT_MODEL_PATH = "speculative_draft_model_path"
INFO_CONTEXT_LENGTH = "context_length"  # a server argument: None when the model's default applies
INFO_MAX_REQ_INPUT_LEN = "max_req_input_len"  # from the scheduler
INFO_SKIP_TOKENIZER_INIT = "skip_tokenizer_init"  # no tokenizer: text prompts are refused
SERVER_ARGS_READ = (INFO_SPECULATIVE_ALGORITHM, INFO_NUM_DRAFT_TOKENS, INFO_TP_SIZE, INFO_MODEL_PATH,
                    INFO_SERVED_MODEL_NAME, INFO_DRAFT_MODEL_PATH, INFO_CONTEXT_LENGTH, INFO_SKIP_TOKENIZER_INIT)
#: /model_info: the model the server answers under now
MODEL_INFO_READ = (INFO_MODEL_PATH, INFO_SERVED_MODEL_NAME)
MODEL_CARD_MAX_LEN = "max_model_len"  # /v1/models data[i]

# -- Prometheus metrics parsed -----------------------------------------------------------------------
METRIC_SPEC_ACCEPT_LENGTH = "sglang:spec_accept_length"
METRIC_SPEC_ACCEPT_RATE = "sglang:spec_accept_rate"
METRIC_GEN_THROUGHPUT = "sglang:gen_throughput"
#: A counter (the sample's name; SGLang defines it so): the completion tokens of every request
#: that finished, counted when it finishes (its tokenizer's /health probes are not counted)
METRIC_GENERATION_TOKENS = "sglang:generation_tokens_total"
METRICS_PARSED = (METRIC_SPEC_ACCEPT_LENGTH, METRIC_SPEC_ACCEPT_RATE, METRIC_GEN_THROUGHPUT,
                  METRIC_GENERATION_TOKENS)

# -- log lines -------------------------------------------------------------------------------------
READY_LINE = "The server is fired up and ready to roll!"
#: Lines that mean the server is finished, whatever its HTTP side still answers. Ordered most
#: specific first: a crash logs a generic line ("Scheduler hit an exception") before the
#: traceback's specific one ("CUDA error: ..."), and the cause shown is the most specific found.
FATAL_SIGNATURES: tuple[str, ...] = (
    "CUDA error: an illegal memory access was encountered",
    "CUDA error: an illegal instruction was encountered",
    "CUDA out of memory",
    "Capture cuda graph failed",
    "Not enough memory",
    "Scheduler hit an exception",
    "Received sigquit from a child process",
    "crashed with exit code",
    "watchdog timeout",
    "Watchdog caught collective operation timeout",
    "Health check failed",
    "Initialization failed",
)
#: Of those, the ones that mean "stuck" rather than "crashed" (the process may well be alive).
HANG_SIGNATURES: tuple[str, ...] = (
    "watchdog timeout",
    "Watchdog caught collective operation timeout",
    "Health check failed",
)
#: Fatal lines that SGLang's processes print but SGLang's code does not write: the CUDA runtime's
#: errors and torch's allocator and NCCL watchdog, whatever SGLang release runs them.
FATAL_SIGNATURES_FROM_TORCH = frozenset({
    "CUDA error: an illegal memory access was encountered",
    "CUDA error: an illegal instruction was encountered",
    "CUDA out of memory",
    "Watchdog caught collective operation timeout",
})
#: The scheduler's periodic decode line starts with this, then `, ` (older releases: `.`), or
#: ` [N], ` with SGLANG_LOG_FORWARD_ITERS set (N: the forward iteration).
DECODE_BATCH = "Decode batch"
