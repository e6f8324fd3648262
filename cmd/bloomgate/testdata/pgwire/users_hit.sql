-- BenchmarkPGFrontUsersPgbench, 12 % of lookups: a key of the loaded table.
-- n counts the client's lookups (users_race.sql uses it as a clock).
\set n :n + 1
\set k random(0, :rows - 1)
SELECT id, email, name FROM public.users WHERE email = 'user:k@example.com';
