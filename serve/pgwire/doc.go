// Package pgwire is bloomgate serve's PostgreSQL front end: it relays each
// client session to an upstream PostgreSQL unchanged (startup, the
// database's own authentication, BackendKeyData and cancel requests, COPY,
// notices, LISTEN/NOTIFY, every message it does not act on) and answers
// configured statements itself when the key is definitely absent.
//
// Messages it does not act on are relayed as they came, one whole message
// at a time, without being decoded; pgproto3 decodes the ones it acts on.
// TLS from clients (Config.TLSConfig) and to the upstream (Config.Upstream
// as a URL with sslmode) are independent of each other.
//
// A statement is answered locally only when all of these hold, and is
// forwarded otherwise, counted by reason (bloomgate_pgwire_forwarded_total):
//
//   - it is one of the set's answer statements, token for token (keywords
//     and unquoted names in any case, whitespace and comments free), on the
//     extended protocol with its parameters, or on the simple protocol with
//     a string literal for each ('…' under standard_conforming_strings on,
//     E'…', $$…$$); every parameter text PostgreSQL accepts;
//   - the session is idle outside a transaction block, nothing it sent
//     before awaits an answer, its client_encoding is UTF8, it has not
//     changed search_path or role, and it is connected to the set's
//     database;
//   - the statement's result shape was learned in a forwarded execution that
//     succeeded for the same database and role, since the last DDL seen;
//   - the set is ready, its filter says the key is absent, and its applied
//     position reached pg_current_wal_insert_lsn() read after the query
//     arrived (so every transaction committed before the query, by any
//     session, this one included, has been applied), within PositionWait.
//
// Normalisation: the statement compares the bare column with the bare
// parameter, so a row matches only if its key equals the parameter; equal
// strings normalise equally under any normaliser, so looking up the
// normalised parameter in the set (which holds normalised column values)
// never misses a matching row. A normaliser only adds false positives.
// Comparisons through functions (lower(email) = lower($1)) are refused.
package pgwire
