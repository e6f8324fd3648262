<?php
// Token revocation, through bloomgate serve with phpredis: a standalone
// cuckoo filter "revoked" in front of the revocation table.
// Usage: php revocation.php HOST PORT PASSWORD
[, $host, $port, $password] = $argv;

$redis = new Redis();
$redis->connect($host, (int) $port);
$redis->auth($password);

$revokedTable = []; // stands in for the revocations table

function revoke(Redis $redis, array &$table, string $tokenId): void
{
    $redis->rawCommand('CF.ADD', 'revoked', $tokenId); // before the INSERT commits
    $table[$tokenId] = true;                            // INSERT INTO revocations ...
}

function is_revoked(Redis $redis, array $table, string $tokenId): bool
{
    if (!$redis->rawCommand('CF.EXISTS', 'revoked', $tokenId)) {
        return false; // definitely not revoked: no database query
    }
    return isset($table[$tokenId]); // SELECT 1 FROM revocations WHERE token_id = ?
}

function unrevoke(Redis $redis, array &$table, string $tokenId): void
{
    unset($table[$tokenId]);                           // DELETE FROM revocations ...
    $redis->rawCommand('CF.DEL', 'revoked', $tokenId); // after the DELETE commits
}

function check(bool $ok, string $what): void
{
    if (!$ok) {
        fwrite(STDERR, "FAIL: $what\n");
        exit(1);
    }
    echo "ok: $what\n";
}

$redis->rawCommand('CF.RESERVE', 'revoked', 10000);
for ($i = 0; $i < 100; $i++) {
    revoke($redis, $revokedTable, "tok-$i");
}
for ($i = 0; $i < 100; $i++) {
    check(is_revoked($redis, $revokedTable, "tok-$i"), "tok-$i is revoked");
}
check(!is_revoked($redis, $revokedTable, "tok-live"), "tok-live is valid");
unrevoke($redis, $revokedTable, "tok-5");
check(!is_revoked($redis, $revokedTable, "tok-5"), "tok-5 is valid again");
check($redis->rawCommand('CF.COUNT', 'revoked', 'tok-5') === 0, "tok-5 left the filter");
