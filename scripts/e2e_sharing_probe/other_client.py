"""Another client: long /generate requests back to back until killed."""
import json, sys, time, urllib.request
url = sys.argv[1]
body = json.dumps({"text": "Tell me a very long story about a lighthouse.",
                   "sampling_params": {"max_new_tokens": 4000, "temperature": 0, "ignore_eos": True}}).encode()
while True:
    t = time.time()
    req = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    print(f"other client: {out['meta_info']['completion_tokens']} tokens in {time.time()-t:.1f}s", flush=True)
