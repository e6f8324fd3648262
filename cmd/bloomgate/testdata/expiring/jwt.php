<?php
// JWT revocation through bloomgate serve with phpredis: every request checks
// the token's jti against the expiring key "revoked"; logout revokes the jti
// until the token's own exp, after which the entry drops out by itself.
// Usage: php jwt.php HOST PORT
[, $host, $port] = $argv;

$redis = new Redis();
$redis->connect($host, (int) $port);

const SECRET = 'test-secret';

// bg sends a command and throws on an error reply (phpredis would return false).
function bg(Redis $redis, ...$args)
{
    $redis->clearLastError();
    $reply = $redis->rawCommand(...$args);
    if ($reply === false && $redis->getLastError() !== null) {
        throw new RuntimeException($args[0] . ': ' . $redis->getLastError());
    }
    return $reply;
}

function b64url(string $s): string { return rtrim(strtr(base64_encode($s), '+/', '-_'), '='); }

function issue(string $sub, int $ttl): string
{
    $head = b64url(json_encode(['alg' => 'HS256', 'typ' => 'JWT']));
    $body = b64url(json_encode(['sub' => $sub, 'jti' => bin2hex(random_bytes(16)), 'exp' => time() + $ttl]));
    return "$head.$body." . b64url(hash_hmac('sha256', "$head.$body", SECRET, true));
}

// verify returns the token's claims, or null: bad signature, expired, or revoked.
function verify(Redis $redis, string $jwt): ?array
{
    [$head, $body, $sig] = explode('.', $jwt);
    if (!hash_equals(b64url(hash_hmac('sha256', "$head.$body", SECRET, true)), $sig)) {
        return null;
    }
    $claims = json_decode(base64_decode(strtr($body, '-_', '+/')), true);
    if ($claims['exp'] <= time()) {
        // Expired: no lookup needed. time() is whole seconds: in the exp
        // second itself the server may have refused the revocation as
        // already past.
        return null;
    }
    if (bg($redis, 'BG.XEXISTS', 'revoked', $claims['jti'])) {
        return null; // revoked (or, at 0.1 %, a false positive: the user logs in again)
    }
    return $claims;
}

// logout revokes the token until its own expiry.
function logout(Redis $redis, string $jwt): void
{
    [, $body] = explode('.', $jwt);
    $claims = json_decode(base64_decode(strtr($body, '-_', '+/')), true);
    try {
        bg($redis, 'BG.XADD', 'revoked', $claims['jti'], 'EXAT', $claims['exp']);
    } catch (RuntimeException $e) {
        if (strpos($e->getMessage(), 'in the past') === false) {
            throw $e; // "expiry is in the past": the token expired meanwhile, nothing to revoke
        }
    }
}

function check(bool $ok, string $what): void
{
    if (!$ok) {
        fwrite(STDERR, "FAIL: $what\n");
        exit(1);
    }
    echo "ok: $what\n";
}

// One hour of max TTL as in production would make the test wait; tokens here
// live 4 to 6 seconds (3 at least, exp being whole seconds) and the key's max
// TTL is 7 seconds, or longer where round trips are slow (a loaded machine),
// so that every token outlives the ~400 round trips before its last check
// with room to spare and every check stays strict (with 2 s, a third of the
// live tokens had expired before their check at load 20).
$start = microtime(true);
for ($i = 0; $i < 20; $i++) {
    $redis->ping();
}
$life = max(4, (int) ceil((microtime(true) - $start) / 20 * 400 * 2));
$redis->rawCommand('BG.XRESERVE', 'revoked', '0.001', 10000, $life + 3);
$tokens = [];
for ($i = 0; $i < 200; $i++) {
    $tokens[] = issue("user$i", $life + $i % 3);
}
foreach ($tokens as $i => $t) {
    if ($i % 2 == 0) {
        logout($redis, $t);
    }
}
$bad = 0;
foreach ($tokens as $i => $t) {
    $ok = verify($redis, $t) !== null;
    if ($i % 2 == 0 && $ok) {
        $bad++; // a revoked token accepted: a false negative
    }
}
check($bad == 0, "every revoked token is refused");
$accepted = 0;
foreach ($tokens as $i => $t) {
    if ($i % 2 == 1 && verify($redis, $t) !== null) {
        $accepted++;
    }
}
check($accepted >= 95, "$accepted of 100 live tokens accepted");
$info = $redis->rawCommand('BG.XINFO', 'revoked', 'ITEMS');
check($info[0] == 100, "100 revocations held");
logout($redis, issue('late', -1)); // already expired: nothing to do, no error
// Every token expired and a window passed within $life + 5 s: the
// revocations must be gone by then (asked every 50 ms, so the check ends
// once they are).
$deadline = microtime(true) + $life + 5;
while ($redis->rawCommand('BG.XINFO', 'revoked', 'GENERATIONS')[0] != 0 && microtime(true) < $deadline) {
    usleep(50000);
}
$gens = $redis->rawCommand('BG.XINFO', 'revoked', 'GENERATIONS');
check($gens[0] == 0, "every revocation dropped out after its token's expiry, with no delete");
