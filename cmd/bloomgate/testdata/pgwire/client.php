<?php
// A PHP service's lookups with PDO_pgsql, run by TestPGFrontClients through
// the bloomgate PostgreSQL front end and straight to PostgreSQL: both runs
// must print the same. Native prepares send Parse/Bind/Execute; emulated
// ones send the simple protocol with literals.
[, $dsn, $user, $mode, $who] = $argv;
$opts = [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION, PDO::ATTR_EMULATE_PREPARES => $mode === 'emulated'];
$db = new PDO($dsn, $user, null, $opts);
$writer = new PDO($dsn, $user, null, $opts);

function find_user(PDO $db, string $email): array
{
    $st = $db->prepare('SELECT email, name FROM public.users WHERE email = ?');
    $st->execute([$email]);
    $cols = [];
    for ($i = 0; $i < $st->columnCount(); $i++) {
        $cols[] = $st->getColumnMeta($i)['name'] . ':' . $st->getColumnMeta($i)['native_type'];
    }
    return [$cols, $st->fetchAll(PDO::FETCH_NUM)];
}

for ($round = 0; $round < 3; $round++) { // later rounds are answered from the learned shape
    foreach (['user5@example.com', 'nobody@example.com', "o'brien\\x@example.com", 'naïve@example.com'] as $email) {
        echo $round, ' ', $email, ' ', json_encode(find_user($db, $email)), "\n";
    }
}
// A key another session inserted just before: never missed.
for ($i = 0; $i < 50; $i++) {
    $email = "php-$who-$i@example.com";
    $writer->prepare("INSERT INTO users VALUES (?, 'new')")->execute([$email]);
    echo 'just inserted ', count(find_user($db, $email)[1]), "\n";
}
// The session's own key inside its transaction and after.
$email = "php-own-$who@example.com";
$db->beginTransaction();
$db->prepare("INSERT INTO users VALUES (?, 'own')")->execute([$email]);
echo 'own, in the transaction ', count(find_user($db, $email)[1]), "\n";
$db->commit();
echo 'own, after commit ', count(find_user($db, $email)[1]), "\n";
try {
    $db->prepare('SELECT email FROM nosuch WHERE email = ?')->execute(['x']);
} catch (PDOException $e) {
    echo 'error ', $e->getCode(), "\n";
}
echo 'after the error ', json_encode(find_user($db, 'nobody@example.com')), "\n";
