<?php
// Usage: php fanout_check.php KEYFILE HOST:PORT...
// KEYFILE holds "key position" lines of committed rows. Asks every server
// BF.EXISTS and BF.EXISTSAT (the writer's position) for every key and
// prints "checked=N absent=M"; M must be 0.
$lines = file($argv[1], FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES);
$checked = 0;
$absent = 0;
foreach (array_slice($argv, 2) as $addr) {
    [$host, $port] = explode(':', $addr);
    $redis = new Redis();
    $redis->connect($host, (int)$port, 2.0);
    foreach ($lines as $line) {
        [$key, $pos] = explode(' ', $line);
        foreach ([$redis->rawCommand('BF.EXISTS', 'users', $key),
                  $redis->rawCommand('BF.EXISTSAT', 'users', $key, $pos)] as $r) {
            $checked++;
            if ($r !== 1) {
                $absent++;
                fwrite(STDERR, "absent on $addr: $key at $pos (" . var_export($r, true) . ")\n");
            }
        }
    }
    $redis->close();
}
echo "checked=$checked absent=$absent\n";
exit($absent == 0 ? 0 : 1);
