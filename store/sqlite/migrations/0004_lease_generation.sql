-- 0004: fencing. A lease's generation grows whenever the lease passes to
-- another holder (a renewal, or the same holder taking it back, keeps it);
-- a writer presents it with its writes (store.Fence) and the store refuses
-- them once it is stale. Released leases keep their row (expired) so the
-- generation is never reused. Leases taken before this migration are
-- generation 1.

ALTER TABLE leases ADD COLUMN generation INTEGER NOT NULL DEFAULT 1 CHECK (generation > 0);
