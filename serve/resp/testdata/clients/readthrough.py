"""Read-through lookup with bloomgate serve and redis-py.

"users" is a table-backed set over the users table: the filter keeps lookups
of absent e-mails off the database.
Usage: python3 readthrough.py HOST PORT PASSWORD SQLITE_FILE TAKEN_EMAIL
"""
import sqlite3
import sys

import redis

host, port, password, db_path, taken = sys.argv[1:6]
r = redis.Redis(host=host, port=int(port), password=password)
db = sqlite3.connect(db_path)
queries = 0


def find_user(email):
    global queries
    if not r.bf().exists("users", email):
        return None  # definitely absent: the database is not queried
    queries += 1
    return db.execute("SELECT id, email FROM users WHERE email = ?", (email,)).fetchone()


def check(ok, what):
    if not ok:
        sys.exit("FAIL: " + what)
    print("ok: " + what)


check(find_user(taken) is not None, taken + " is found")
absent = ["nobody%d@example.com" % i for i in range(1000)]
check(all(find_user(e) is None for e in absent), "absent users are not found")
check(queries < 50, "%d database queries for 1001 lookups" % queries)
check(r.execute_command("BG.EXISTS", "users", taken) == 1, "BG.EXISTS confirms " + taken)

# redis-py's typed Bloom and cuckoo commands on standalone filters.
bf, cf = r.bf(), r.cf()
bf.create("py:bf", 0.01, 1000)
check(bf.add("py:bf", "a") == 1 and bf.add("py:bf", "a") == 0, "BF.ADD")
check(bf.madd("py:bf", "b", "c") == [1, 1], "BF.MADD")
check(bf.mexists("py:bf", "a", "b", "zz") == [1, 1, 0], "BF.MEXISTS")
check(bf.info("py:bf").capacity == 1000, "BF.INFO")
check(r.execute_command("BF.CARD", "py:bf") == 3, "BF.CARD")
cf.create("py:cf", 1000)
check(cf.add("py:cf", "x") == 1 and cf.count("py:cf", "x") == 1, "CF.ADD, CF.COUNT")
check(cf.delete("py:cf", "x") == 1 and cf.exists("py:cf", "x") == 0, "CF.DEL")
chunks, it = [], 0
while True:
    it, data = bf.scandump("py:bf", it)
    if it == 0:
        break
    chunks.append((it, data))
for it, data in chunks:
    bf.loadchunk("py:bf2", it, data)
check(bf.mexists("py:bf2", "a", "b", "c") == [1, 1, 1], "BF.SCANDUMP into BF.LOADCHUNK")
