"""Revocations with spread expiries through bloomgate serve and redis-py.

Revokes N ids with expiries spread over the max TTL, then keeps revoking at a
steady rate for two max TTLs while it checks, over and over, that every id
whose expiry has not passed is reported present (no false negatives), that
ids a window past their expiry are gone (up to the false-positive rate), and
that the memory held after the second max TTL of churn is within 1.2 x the
first's.
Usage: python3 churn.py HOST PORT N MAX_TTL_SECONDS
"""
import random
import sys
import time

import redis

host, port, n, max_ttl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = redis.Redis(host=host, port=port)
window = max_ttl / 7.0  # 8 generations
batch = 2000
rng = random.Random(1)

# Sized for the N initial adds plus the churn, both within one max TTL.
churn_per_sec = max(1, n // max_ttl // 4)
r.execute_command("BG.XRESERVE", "revoked", "0.001", n + churn_per_sec * max_ttl, max_ttl)

ids = []  # (id, lower bound of the expiry, upper bound), seconds
next_id = 0


def revoke(count, ttl_of):
    """Revokes count new ids in BG.XMADD batches sharing one TTL each."""
    global next_id
    pipe = r.pipeline(transaction=False)
    sent = []
    for start in range(0, count, batch):
        k = min(batch, count - start)
        ttl_ms = ttl_of()
        names = ["jti-%d" % (next_id + i) for i in range(k)]
        next_id += k
        pipe.execute_command("BG.XMADD", "revoked", "PX", ttl_ms, *names)
        sent.append((names, ttl_ms))
    before = time.time()
    replies = pipe.execute()
    after = time.time()
    for (names, ttl_ms), rep in zip(sent, replies):
        if len(rep) != len(names):
            sys.exit("FAIL: BG.XMADD replied %r" % (rep,))
        for name in names:
            ids.append((name, before + ttl_ms / 1000.0, after + ttl_ms / 1000.0))


def check():
    """One pass over every id: returns (false negatives, stale, stale present)."""
    fn = stale = stale_present = 0
    pipe = r.pipeline(transaction=False)
    chunks = []
    now = time.time()  # before any lookup is sent
    for start in range(0, len(ids), 10000):
        chunk = ids[start:start + 10000]
        pipe.execute_command("BG.XMEXISTS", "revoked", *[c[0] for c in chunk])
        chunks.append(chunk)
    replies = pipe.execute()
    done = time.time()  # after every lookup was answered
    for chunk, rep in zip(chunks, replies):
        for (name, lo, hi), present in zip(chunk, rep):
            if lo > done and not present:
                fn += 1
                if fn <= 5:
                    print("false negative: %s expires in %.3f s" % (name, lo - done))
            elif hi + window < now:
                stale += 1
                stale_present += 1 if present else 0
    return fn, stale, stale_present


def used():
    return int(r.execute_command("BG.XINFO", "revoked", "SIZE")[0])


start = time.time()
revoke(n, lambda: rng.randint(1000, max_ttl * 1000 - 1000))
print("revoked %d ids in %.1f s" % (n, time.time() - start))

passes = 0
mem = {}
churn_start = time.time()
last = churn_start
while time.time() < churn_start + 2 * max_ttl + window + 1:
    now = time.time()
    if now < churn_start + 2 * max_ttl:
        revoke(max(1, int((now - last) * churn_per_sec)), lambda: max_ttl * 1000)
    last = now
    fn, stale, stale_present = check()
    passes += 1
    if fn:
        sys.exit("FAIL: %d false negatives in pass %d" % (fn, passes))
    if stale >= 2000 and stale_present > 0.01 * stale:
        sys.exit("FAIL: %d of %d ids a window past their expiry still present" % (stale_present, stale))
    elapsed = time.time() - churn_start
    for k in (1, 2):
        if k not in mem and elapsed >= k * max_ttl:
            mem[k] = used()
            print("after %d max TTL of churn: %d bytes held" % (k, mem[k]))
    time.sleep(0.02)  # leave the server some CPU
    # Forget ids long expired, so passes stay short.
    cut = time.time() - 3 * window
    ids = [e for e in ids if e[2] > cut]

print("ok: %d passes, 0 false negatives, %d ids revoked" % (passes, next_id))
if mem[2] > 1.2 * mem[1]:
    sys.exit("FAIL: memory grew with churn: %d then %d bytes" % (mem[1], mem[2]))
print("ok: memory after the second max TTL of churn is %.2f x the first's" % (mem[2] / mem[1]))
