-- SQLite workload for chromalloc's real-program tests, fed to the Debian sqlite3 CLI
-- (`sqlite3 -batch -bail -init /dev/null test.db < sqlite_workload.sql`).  SQLite gets every
-- page-cache page, b-tree cell buffer, sorter run, prepared statement and result string from
-- malloc/realloc/free, so building a ~200k-row database file with a recursive CTE, creating
-- indexes (external sorts), running joins, GROUP BY, ORDER BY and window functions over it,
-- updating and deleting tens of thousands of rows, checking the file with
-- PRAGMA integrity_check and rebuilding it with VACUUM exercises the allocator with a
-- realistic mix of small and page-sized blocks.  All data is computed from the row number
-- (no random()), so the printed results are deterministic; tests/programs/run.sh compares
-- them between a plain run, a preloaded run and the expected values embedded in run.sh.
.headers off
.mode list
PRAGMA page_size = 4096;
PRAGMA cache_size = -16000;
PRAGMA temp_store = MEMORY;
PRAGMA journal_mode = DELETE;
PRAGMA synchronous = OFF;

CREATE TABLE customers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  region TEXT NOT NULL,
  since TEXT NOT NULL
);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  amount INTEGER NOT NULL,          -- cents
  day TEXT NOT NULL,
  note TEXT NOT NULL
);
CREATE TABLE products (id INTEGER PRIMARY KEY, title TEXT, price INTEGER);
CREATE TABLE order_items (order_id INTEGER, product_id INTEGER, qty INTEGER);

BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000)
INSERT INTO customers
SELECT x,
       printf('customer-%05d-%s', x, substr('abcdefghijklmnopqrstuvwxyz', 1 + x % 26, 1 + x % 11)),
       CASE x % 5 WHEN 0 THEN 'north' WHEN 1 THEN 'south' WHEN 2 THEN 'east'
                  WHEN 3 THEN 'west' ELSE 'central' END,
       date('2015-01-01', '+' || (x * 13 % 3000) || ' days')
FROM c;

WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO orders
SELECT x,
       (x * 7919) % 5000 + 1,
       (x * 104729) % 100000,
       date('2020-01-01', '+' || (x * 31 % 1000) || ' days'),
       printf('%0*d', 8 + (x * 37) % 48, x)
FROM c;

WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300)
INSERT INTO products SELECT x, 'product ' || x || ' ' || hex(x * 2654435761), 100 + (x * 977) % 9000 FROM c;

WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)
INSERT INTO order_items SELECT (x * 3) % 200000 + 1, (x * 17) % 300 + 1, 1 + x % 4 FROM c;
COMMIT;

CREATE INDEX orders_day_amount ON orders(day, amount);
CREATE INDEX items_order ON order_items(order_id, product_id);

SELECT 'counts', (SELECT count(*) FROM customers), (SELECT count(*) FROM orders),
       (SELECT count(*) FROM order_items), (SELECT sum(amount) FROM orders);

SELECT 'region', c.region, count(*), sum(o.amount), max(o.amount)
FROM orders o JOIN customers c ON c.id = o.customer_id
GROUP BY c.region ORDER BY c.region;

SELECT 'month', strftime('%Y-%m', day) AS m, count(*), sum(amount)
FROM orders WHERE day BETWEEN '2021-03-01' AND '2021-07-31'
GROUP BY m ORDER BY m;

SELECT 'items', p.id, sum(i.qty), sum(i.qty * p.price)
FROM order_items i JOIN products p ON p.id = i.product_id JOIN orders o ON o.id = i.order_id
WHERE o.amount > 50000
GROUP BY p.id ORDER BY sum(i.qty * p.price) DESC, p.id LIMIT 3;

SELECT 'rank', region, name, total FROM (
  SELECT c.region, c.name, sum(o.amount) AS total,
         row_number() OVER (PARTITION BY c.region ORDER BY sum(o.amount) DESC, c.id) AS rn
  FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.id)
WHERE rn = 1 ORDER BY region;

-- A big unindexed sort and a long group_concat string.
SELECT 'sort', sum(rn * (amount % 97)) % 1000000007 FROM (
  SELECT amount, row_number() OVER (ORDER BY length(note) DESC, amount, id) AS rn
  FROM orders WHERE id % 2 = 0);
SELECT 'concat', length(group_concat(note, ',')), length(group_concat(DISTINCT substr(note, -3)))
FROM orders;
SELECT 'json', length(json_group_array(json_object('id', id, 'note', note))) FROM orders WHERE id % 10 = 0;

UPDATE orders SET amount = amount + 1, note = note || '-u' WHERE day < '2020-06-01';
SELECT 'updated', changes();
DELETE FROM orders WHERE id % 7 = 0;
SELECT 'deleted', changes();
DELETE FROM order_items WHERE order_id NOT IN (SELECT id FROM orders);
SELECT 'orphans', changes();
SELECT 'after', count(*), sum(amount), sum(length(note)) FROM orders;

PRAGMA integrity_check;
VACUUM;
PRAGMA quick_check;
SELECT 'freelist', freelist_count FROM pragma_freelist_count;
SELECT 'final', count(*), sum(amount), min(day), max(day) FROM orders;
SELECT 'lookup', id, amount, day, length(note) FROM orders WHERE id IN (1, 99999, 199999) ORDER BY id;
