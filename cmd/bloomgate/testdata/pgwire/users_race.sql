-- BenchmarkPGFrontUsersPgbench, 2 % of lookups: a key the writer inserts
-- around now (new-<i>@example.com, i counted from the writer's start at
-- wrate rows a second). pgbench has no clock, so now is estimated from the
-- client's lookups n at rate/clients a second since the run began, when the
-- writer had inserted base rows; a run that falls behind its rate picks
-- keys from further back, more of them committed.
\set n :n + 1
\set j greatest(:base + :n * :clients * :wrate / :rate + random(-20, 20), 0)
SELECT id, email, name FROM public.users WHERE email = 'new-:j@example.com';
