"""Revocations with spread expiries through bloomgate serve and redis-py.

Revokes N ids with expiries spread over the max TTL (the first max TTL's
worth), then, from a second connection, keeps revoking at a steady rate for
two max TTLs while it checks, over and over, that every id whose expiry has
not passed is reported present (no false negatives) and that ids a window
past their expiry are gone (up to the false-positive rate). The memory held
at any pass during the second max TTL of churn must be within 1.2 x the
memory held after the first, and never above the key's bound.
Usage: python3 churn.py HOST PORT N MAX_TTL_SECONDS
"""
import random
import sys
import threading
import time

import redis

host, port, n, max_ttl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = redis.Redis(host=host, port=port)
window = max_ttl / 7.0  # 8 generations
# Each BG.XMADD shares one expiry: small enough batches spread the
# expiries evenly over the windows, as the key's capacity assumes.
batch = max(100, n // 1000)
rng = random.Random(1)

# Sized for the N initial adds plus the churn, both within one max TTL.
churn_per_sec = max(1, n // max_ttl // 4)
r.execute_command("BG.XRESERVE", "revoked", "0.001", n + churn_per_sec * max_ttl, max_ttl)

ids = []  # (id, lower bound of the expiry, upper bound), seconds
ids_lock = threading.Lock()
next_id = 0


def revoke(conn, count, ttl_of):
    """Revokes count new ids in BG.XMADD batches sharing one TTL each."""
    global next_id
    pipe = conn.pipeline(transaction=False)
    sent = []
    for start in range(0, count, batch):
        k = min(batch, count - start)
        ttl_ms = ttl_of()
        with ids_lock:
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
        with ids_lock:
            for name in names:
                ids.append((name, before + ttl_ms / 1000.0, after + ttl_ms / 1000.0))


def check():
    """One pass over every id: returns (false negatives, stale, stale present)."""
    fn = stale = stale_present = 0
    pipe = r.pipeline(transaction=False)
    chunks = []
    with ids_lock:
        snapshot = list(ids)
    now = time.time()  # before any lookup is sent
    for start in range(0, len(snapshot), 10000):
        chunk = snapshot[start:start + 10000]
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
revoke(r, n, lambda: rng.randint(1000, max_ttl * 1000 - 1000))
print("revoked %d ids in %.1f s" % (n, time.time() - start))
mem = {0: used()}
print("after the first max TTL's revocations: %d bytes held" % mem[0])

churn_start = time.time()
stop = threading.Event()


def churn():
    """Revokes churn_per_sec ids a second, in five batches, with the max TTL."""
    conn = redis.Redis(host=host, port=port)
    tick = churn_start
    while not stop.is_set() and tick < churn_start + 2 * max_ttl:
        tick += 0.2
        revoke(conn, max(1, churn_per_sec // 5), lambda: max_ttl * 1000)
        time.sleep(max(0, tick - time.time()))


churner = threading.Thread(target=churn)
churner.start()
passes = 0
try:
    while time.time() < churn_start + 2 * max_ttl + window + 1:
        fn, stale, stale_present = check()
        passes += 1
        if fn:
            sys.exit("FAIL: %d false negatives in pass %d" % (fn, passes))
        if stale >= 2000 and stale_present > 0.01 * stale:
            sys.exit("FAIL: %d of %d ids a window past their expiry still present" % (stale_present, stale))
        elapsed = time.time() - churn_start
        if elapsed >= max_ttl:
            held = used()
            if 1 not in mem:
                mem[1] = held
                print("after 1 max TTL of churn: %d bytes held" % held)
            elif elapsed <= 2 * max_ttl:
                mem[2] = max(mem.get(2, 0), held)
        time.sleep(0.02)  # leave the server some CPU
        # Forget ids long expired, so passes stay short.
        cut = time.time() - 3 * window
        with ids_lock:
            ids[:] = [e for e in ids if e[2] > cut]
finally:
    stop.set()
    churner.join()

print("ok: %d passes, 0 false negatives, %d ids revoked" % (passes, next_id))
bound = int(r.execute_command("BG.XINFO", "revoked", "MAXSIZE")[0])
print("most bytes held during the second max TTL of churn: %d (bound %d)" % (mem[2], bound))
if mem[2] > 1.2 * mem[1] or mem[2] > bound:
    sys.exit("FAIL: memory grew with churn: %d bytes after one max TTL, up to %d in the second" % (mem[1], mem[2]))
print("ok: memory during the second max TTL of churn is at most %.2f x the first's" % (mem[2] / mem[1]))
