<?php
// Email uniqueness at signup, through bloomgate serve with phpredis.
// "users" is a table-backed set (the users table, with a confirm query).
// Usage: php email_uniqueness.php HOST PORT PASSWORD TAKEN_EMAIL FREE_EMAIL
[, $host, $port, $password, $taken, $free] = $argv;

$redis = new Redis();
$redis->connect($host, (int) $port);
$redis->auth($password);

// Is the address free? The filter answers "definitely absent" without
// touching the database; on "maybe", BG.EXISTS runs the confirm query.
function email_available(Redis $redis, string $email): bool
{
    return !$redis->rawCommand('BG.EXISTS', 'users', $email);
}

// Signup: add the address to the gate *before* the INSERT commits, so no
// lookup can miss the new row. A rolled-back INSERT costs a false positive.
function register(Redis $redis, string $email): void
{
    $redis->rawCommand('BF.ADD', 'users', $email);
    // INSERT INTO users (email) VALUES ($email); COMMIT;
}

function check(bool $ok, string $what): void
{
    if (!$ok) {
        fwrite(STDERR, "FAIL: $what\n");
        exit(1);
    }
    echo "ok: $what\n";
}

check(!email_available($redis, $taken), "$taken is taken");
check(email_available($redis, $free), "$free is available");
check($redis->rawCommand('BF.EXISTS', 'users', $taken) === 1, "the filter may contain $taken");
register($redis, $free);
check($redis->rawCommand('BF.EXISTS', 'users', $free) === 1, "the filter holds $free after register");
// Our harness never commits the INSERT, so the confirm query still finds no
// row: the address is available, at the cost of one false positive.
check(email_available($redis, $free), "$free without its row is still available");
