# A SQLAlchemy ORM service's lookups (SQLAlchemy over psycopg2: the simple
# protocol with literals), run by TestPGFrontClients through the bloomgate
# PostgreSQL front end and straight to PostgreSQL: both must print the same.
# The ORM's statement for User.email == x is one of the set's answer
# statements in the test's config.
import sys

from sqlalchemy import Column, Text, create_engine, text
from sqlalchemy.orm import Session, declarative_base

url, who = sys.argv[1], sys.argv[2]
Base = declarative_base()


class User(Base):
    __tablename__ = "users"
    __table_args__ = {"schema": "public"}
    email = Column(Text, primary_key=True)
    name = Column(Text)


engine = create_engine(url, isolation_level="AUTOCOMMIT")
writer = create_engine(url, isolation_level="AUTOCOMMIT")


def find_user(s, email):
    return [(u.email, u.name) for u in s.query(User).filter(User.email == email).all()]


with Session(engine) as s:
    for i in range(3):  # the later rounds are answered from the learned shape
        for email in ["user5@example.com", "nobody@example.com", "o'brien\\x@example.com"]:
            print(i, email, find_user(s, email))
            s.expunge_all()
    # A key another session inserted just before: never missed.
    for i in range(30):
        email = "orm-%s-%d@example.com" % (who, i)
        with writer.connect() as w:
            w.execute(text("INSERT INTO users VALUES (:e, 'new')"), {"e": email})
        print("just inserted", len(find_user(s, email)))
# The session's own row inside its transaction and after.
with Session(create_engine(url)) as s:
    email = "orm-own-%s@example.com" % who
    s.add(User(email=email, name="own"))
    s.flush()
    print("own, in the transaction", len(find_user(s, email)))
    s.commit()
    print("own, after commit", len(find_user(s, email)))
