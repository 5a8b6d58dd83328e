-- A counter, a log without a unique key, and a versioned subscription: the naive handlers' tables.
CREATE TABLE seen_counts (
    customer_id text PRIMARY KEY,
    seen        integer NOT NULL
);

CREATE TABLE signups (
    customer_id text NOT NULL,
    email       text
);

CREATE TABLE plans (
    subscription_id text PRIMARY KEY,
    status          text   NOT NULL,
    version         bigint NOT NULL
);
