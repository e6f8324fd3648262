"""JWT revocation through bloomgate serve with redis-py.

Every request checks the token's jti against the expiring key "revoked";
logout revokes the jti until the token's own exp, after which the entry drops
out by itself.
Usage: python3 jwt.py HOST PORT
"""
import base64
import hashlib
import hmac
import json
import math
import secrets
import sys
import time

import redis

host, port = sys.argv[1], int(sys.argv[2])
r = redis.Redis(host=host, port=port)
SECRET = b"test-secret"


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=")


def unb64url(s):
    return base64.urlsafe_b64decode(s + b"=" * (-len(s) % 4))


def issue(sub, ttl):
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps({"sub": sub, "jti": secrets.token_hex(16), "exp": int(time.time()) + ttl}).encode())
    sig = b64url(hmac.new(SECRET, head + b"." + body, hashlib.sha256).digest())
    return head + b"." + body + b"." + sig


def verify(jwt):
    """Returns the claims, or None: bad signature, expired, or revoked."""
    head, body, sig = jwt.split(b".")
    if not hmac.compare_digest(b64url(hmac.new(SECRET, head + b"." + body, hashlib.sha256).digest()), sig):
        return None
    claims = json.loads(unb64url(body))
    if claims["exp"] <= time.time():
        return None  # expired: no lookup needed
    if r.execute_command("BG.XEXISTS", "revoked", claims["jti"]):
        return None  # revoked (or, at 0.1 %, a false positive: the user logs in again)
    return claims


def logout(jwt):
    """Revokes the token until its own expiry."""
    claims = json.loads(unb64url(jwt.split(b".")[1]))
    try:
        r.execute_command("BG.XADD", "revoked", claims["jti"], "EXAT", claims["exp"])
    except redis.ResponseError as e:
        if "in the past" not in str(e):
            raise  # "expiry is in the past": the token expired meanwhile


def check(ok, what):
    if not ok:
        sys.exit("FAIL: " + what)
    print("ok: " + what)


# Tokens live a few seconds here: 4 to 6 seconds (3 at least, exp being whole
# seconds), and the key's max TTL is 7, or longer where round trips are slow
# (a loaded machine), so that every token outlives the ~400 round trips before
# its last check with room to spare and every check stays strict (with 2 s, a
# third of the live tokens had expired before their check at load 20).
start = time.time()
for _ in range(20):
    r.ping()
life = max(4, math.ceil((time.time() - start) / 20 * 400 * 2))
r.execute_command("BG.XRESERVE", "revoked", "0.001", 10000, life + 3)
tokens = [issue("user%d" % i, life + i % 3) for i in range(200)]
for t in tokens[::2]:
    logout(t)
check(all(verify(t) is None for t in tokens[::2]), "every revoked token is refused")
accepted = sum(1 for t in tokens[1::2] if verify(t) is not None)
check(accepted >= 95, "%d of 100 live tokens accepted" % accepted)
check(r.execute_command("BG.XINFO", "revoked", "ITEMS")[0] == 100, "100 revocations held")
logout(issue("late", -1))  # already expired: nothing to do, no error
# Every token expired and a window passed within life + 5 s: the
# revocations must be gone by then (asked every 50 ms, so the check ends
# once they are).
deadline = time.time() + life + 5
while r.execute_command("BG.XINFO", "revoked", "GENERATIONS")[0] != 0 and time.time() < deadline:
    time.sleep(0.05)
check(r.execute_command("BG.XINFO", "revoked", "GENERATIONS")[0] == 0,
      "every revocation dropped out after its token's expiry, with no delete")
