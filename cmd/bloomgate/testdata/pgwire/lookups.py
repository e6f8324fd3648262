# One lookup worker of the articles' workload, run by BenchmarkPGFrontUsers
# and TestPGFrontFaults: a psycopg2 service looking users up by email
# (the simple protocol with a literal, as psycopg2 sends it), paced at a
# rate, alternating between the front end and PostgreSQL itself by phase,
# until the duration is over or the stop file exists.
# It writes one line per lookup: via, kind, start (Unix ns, before the
# query was sent), latency (ns), outcome, the result's column type OIDs,
# key. Outcome: r (a row), n (no row), e:CODE (PostgreSQL's error), c (the
# connection failed; it reconnects).
import os
import random
import sys
import time

import psycopg2

(front_dsn, direct_dsn, out_path, start_ns, phase_s, duration_s, rate, rows,
 writer_start_ns, writer_rate, seed, stop_path) = sys.argv[1:13]
start_ns, phase_ns = int(start_ns), int(float(phase_s) * 1e9)
end_ns = start_ns + int(float(duration_s) * 1e9)
rate, rows, writer_rate = float(rate), int(rows), float(writer_rate)
writer_start_ns = int(writer_start_ns)
rng = random.Random(seed)
dsns = {"front": front_dsn, "direct": direct_dsn}
conns = {}
STMT = "SELECT id, email, name FROM public.users WHERE email = %s"


def cursor(via):
    c = conns.get(via)
    if c is None or c.closed:
        c = psycopg2.connect(dsns[via], connect_timeout=5)
        c.autocommit = True
        conns[via] = c
    return c.cursor()


def pick():
    """12 % keys of the loaded table, 86 % keys nobody inserts, 2 % keys the
    writer inserts around now (some committed just before, some just
    after: the race the wrong-answer check looks at)."""
    x = rng.random()
    if x < 0.12:
        return "hit", "user%d@example.com" % rng.randrange(rows)
    if x < 0.98:
        return "miss", "miss-%s-%d@example.com" % (seed, rng.getrandbits(48))
    j = int((time.time_ns() - writer_start_ns) / 1e9 * writer_rate) + rng.randint(-20, 20)
    return "race", "new-%d@example.com" % max(j, 0)


out = []
n = 0
while True:
    due = start_ns + int(n * 1e9 / rate)
    n += 1
    now = time.time_ns()
    if due >= end_ns or now >= end_ns:  # behind the rate: stop on time
        break
    if stop_path and n % 16 == 0 and os.path.exists(stop_path):
        break
    if due > now:
        time.sleep((due - now) / 1e9)
    via = "front" if phase_ns == 0 or ((time.time_ns() - start_ns) // phase_ns) % 2 == 0 else "direct"
    kind, key = pick()
    try:
        cur = cursor(via)
    except psycopg2.Error:
        out.append("%s,%s,%d,0,c,,%s" % (via, kind, time.time_ns(), key))
        time.sleep(0.05)
        continue
    t0 = time.time_ns()
    try:
        cur.execute(STMT, (key,))
        res = cur.fetchall()
        shape = ".".join(str(d.type_code) for d in cur.description)
        outcome = "r" if res else "n"
    except psycopg2.Error as e:
        shape = ""
        if e.pgcode:
            outcome = "e:" + e.pgcode
        else:
            outcome = "c"
            conns.pop(via, None)
    out.append("%s,%s,%d,%d,%s,%s,%s" % (via, kind, t0, time.time_ns() - t0, outcome, shape, key))

with open(out_path, "w") as f:
    f.write("\n".join(out))
    f.write("\n")
