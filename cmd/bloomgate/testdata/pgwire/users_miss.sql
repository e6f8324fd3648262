-- BenchmarkPGFrontUsersPgbench, 86 % of lookups: a key nobody inserts.
\set n :n + 1
\set m random(0, 281474976710655)
SELECT id, email, name FROM public.users WHERE email = 'miss-:m@example.com';
