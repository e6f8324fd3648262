"""Usage: python3 fanout_check.py KEYFILE HOST:PORT...

KEYFILE holds "key position" lines of committed rows. Asks every server
BF.EXISTS and BF.EXISTSAT (the writer's position) for every key and prints
"checked=N absent=M"; M must be 0.
"""
import sys

import redis

rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
checked = absent = 0
for addr in sys.argv[2:]:
    host, port = addr.split(":")
    r = redis.Redis(host=host, port=int(port), socket_timeout=2)
    for key, pos in rows:
        for got in (r.execute_command("BF.EXISTS", "users", key),
                    r.execute_command("BF.EXISTSAT", "users", key, pos)):
            checked += 1
            if got != 1:
                absent += 1
                print(f"absent on {addr}: {key} at {pos} ({got!r})", file=sys.stderr)
    r.close()
print(f"checked={checked} absent={absent}")
sys.exit(0 if absent == 0 else 1)
