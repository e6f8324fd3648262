# A psycopg2 service's lookups, run by TestPGFrontClients through the
# bloomgate PostgreSQL front end and straight to PostgreSQL: both runs must
# print the same. psycopg2 sends the simple protocol with literals.
import sys

import psycopg2

dsn, who = sys.argv[1], sys.argv[2]
conn = psycopg2.connect(dsn)
conn.autocommit = True
writer = psycopg2.connect(dsn)
writer.autocommit = True


def find_user(cur, email):
    cur.execute("SELECT email, name FROM public.users WHERE email = %s", (email,))
    return cur.description and [d.name for d in cur.description], cur.fetchall()


with conn.cursor() as cur:
    for i in range(3):  # the later rounds are answered from the learned shape
        for email in ["user5@example.com", "nobody@example.com", "o'brien\\x@example.com", "naïve@example.com"]:
            print(i, email, find_user(cur, email))
    # A key another session inserted just before: never missed.
    for i in range(50):
        email = "py-%s-%d@example.com" % (who, i)
        writer.cursor().execute("INSERT INTO users VALUES (%s, 'new')", (email,))
        print("just inserted", find_user(cur, email)[1] != [])
    # The session's own key inside its transaction and after.
    email = "py-own-%s@example.com" % who
    conn.autocommit = False
    cur.execute("INSERT INTO users VALUES (%s, 'own')", (email,))
    print("own, in the transaction", len(find_user(cur, email)[1]))
    conn.commit()
    conn.autocommit = True
    print("own, after commit", len(find_user(cur, email)[1]))
    try:
        cur.execute("SELECT email FROM nosuch WHERE email = %s", ("x",))
    except psycopg2.Error as e:
        print("error", e.pgcode)
    print("after the error", find_user(cur, "nobody@example.com"))
