package redisync.interop;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RAtomicLong;
import org.redisson.api.RBucket;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.ClusterServersConfig;
import org.redisson.config.Config;
import org.redisson.config.NameMapper;
import org.redisson.config.ReadMode;
import org.redisson.config.ShardedSubscriptionMode;

/**
 * Runs Redisson's own primitives on command, for redisync's interop tests
 * (tests/redisson.rs). One command per line on stdin, one reply per line on
 * stdout; the driver exits when stdin closes.
 *
 * <p>Client commands (reply {@code <client> ok <redisson id>}):
 * {@code client C single redis://host:port [prefix=P] [watchdog_ms=N]} and
 * {@code client C cluster url,url,... [prefix=P] [watchdog_ms=N]};
 * {@code close C} shuts a client down.
 *
 * <p>Actor commands: {@code C/T op args...}. Actor {@code C/T} is one Java
 * thread of client {@code C}, created on first use; Redisson's locks belong
 * to threads, so each actor is one holder. Its commands run one after the
 * other on that thread, and actors run concurrently. Reply:
 * {@code C/T ok <value> <start µs> <end µs>} (value {@code -} when there is
 * none; times are wall-clock microseconds since the epoch, comparable with
 * the test's own clock on the same machine) or {@code C/T err <exception>}.
 */
public final class Driver {
    private static final Map<String, RedissonClient> CLIENTS = new ConcurrentHashMap<>();
    private static final Map<String, ExecutorService> ACTORS = new ConcurrentHashMap<>();
    private static final PrintWriter OUT = new PrintWriter(
            new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8)));

    private Driver() {}

    public static void main(String[] args) throws Exception {
        String version = Redisson.class.getPackage().getImplementationVersion();
        reply("ready redisson=" + version + " java=" + System.getProperty("java.version"));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.strip();
            if (line.isEmpty()) {
                continue;
            }
            String[] words = line.split(" ");
            try {
                if (words[0].equals("client")) {
                    connect(words);
                } else if (words[0].equals("close")) {
                    RedissonClient client = CLIENTS.remove(words[1]);
                    if (client != null) {
                        client.shutdown();
                    }
                    reply(words[1] + " ok closed");
                } else {
                    String actor = words[0];
                    ACTORS.computeIfAbsent(actor, a -> Executors.newSingleThreadExecutor(r -> {
                        Thread t = new Thread(r, "actor-" + a);
                        t.setDaemon(true);
                        return t;
                    })).submit(() -> run(actor, words));
                }
            } catch (Exception e) {
                boolean clientCommand = words[0].equals("client") || words[0].equals("close");
                reply((clientCommand && words.length > 1 ? words[1] : words[0]) + " err " + describe(e));
            }
        }
        // The test is gone (or done): leave at once, holds and all.
        OUT.flush();
        System.exit(0);
    }

    private static void connect(String[] words) {
        String name = words[1];
        Config config = new Config();
        String prefix = "";
        for (int i = 4; i < words.length; i++) {
            String[] kv = words[i].split("=", 2);
            switch (kv[0]) {
                case "prefix" -> prefix = kv[1];
                case "watchdog_ms" -> config.setLockWatchdogTimeout(Long.parseLong(kv[1]));
                default -> throw new IllegalArgumentException("unknown option " + words[i]);
            }
        }
        if (!prefix.isEmpty()) {
            config.setNameMapper(new PrefixMapper(prefix));
        }
        switch (words[2]) {
            case "single" -> config.useSingleServer().setAddress(words[3]);
            case "cluster" -> {
                // Reads from masters: the counter checks read what the
                // holder just wrote (Redisson reads replicas by default).
                ClusterServersConfig cluster = config.useClusterServers()
                        .setShardedSubscriptionMode(ShardedSubscriptionMode.AUTO)
                        .setReadMode(ReadMode.MASTER);
                for (String url : words[3].split(",")) {
                    cluster.addNodeAddress(url);
                }
            }
            default -> throw new IllegalArgumentException("unknown mode " + words[2]);
        }
        Redisson client = (Redisson) Redisson.create(config);
        CLIENTS.put(name, client);
        reply(name + " ok " + client.getServiceManager().getId());
    }

    /** Redisson's name mapper as a service with a key prefix sets it up. */
    private record PrefixMapper(String prefix) implements NameMapper {
        @Override
        public String map(String name) {
            return prefix + name;
        }

        @Override
        public String unmap(String name) {
            return name.startsWith(prefix) ? name.substring(prefix.length()) : name;
        }
    }

    private static void run(String actor, String[] w) {
        long start = micros();
        try {
            RedissonClient r = CLIENTS.get(actor.substring(0, actor.indexOf('/')));
            if (r == null) {
                throw new IllegalArgumentException("no client for actor " + actor);
            }
            String value = op(r, w);
            reply(actor + " ok " + value + " " + start + " " + micros());
        } catch (Throwable e) {
            reply(actor + " err " + describe(e));
        }
    }

    private static String op(RedissonClient r, String[] w) throws Exception {
        switch (w[1]) {
            case "holder": {
                Redisson redisson = (Redisson) r;
                return redisson.getServiceManager().getId() + ":" + Thread.currentThread().getId();
            }
            case "defaults": {
                Config config = r.getConfig();
                return "watchdog_ms=" + config.getLockWatchdogTimeout()
                        + ",fair_wait_ms=" + config.getFairLockWaitTimeout();
            }
            case "lock": {
                RLock lock = lock(r, w[2], w[3]);
                if (lock instanceof RFencedLock fenced && w.length == 4) {
                    return String.valueOf(fenced.lockAndGetToken());
                }
                if (w.length > 4) {
                    lock.lock(Long.parseLong(w[4]), TimeUnit.MILLISECONDS);
                } else {
                    lock.lock();
                }
                return "-";
            }
            case "try_lock": {
                RLock lock = lock(r, w[2], w[3]);
                long wait = Long.parseLong(w[4]);
                if (lock instanceof RFencedLock fenced && w.length == 5) {
                    Long token = fenced.tryLockAndGetToken(wait, TimeUnit.MILLISECONDS);
                    return token == null ? "false" : String.valueOf(token);
                }
                boolean got = w.length > 5
                        ? lock.tryLock(wait, Long.parseLong(w[5]), TimeUnit.MILLISECONDS)
                        : lock.tryLock(wait, TimeUnit.MILLISECONDS);
                return String.valueOf(got);
            }
            case "unlock":
                lock(r, w[2], w[3]).unlock();
                return "-";
            case "force_unlock":
                return String.valueOf(lock(r, w[2], w[3]).forceUnlock());
            case "hold_count":
                return String.valueOf(lock(r, w[2], w[3]).getHoldCount());
            case "is_locked":
                return String.valueOf(lock(r, w[2], w[3]).isLocked());
            case "held":
                return String.valueOf(lock(r, w[2], w[3]).isHeldByCurrentThread());
            case "ttl":
                return String.valueOf(lock(r, w[2], w[3]).remainTimeToLive());
            case "incr":
                // incr KIND NAME COUNTER INSIDE ITERATIONS
                return String.valueOf(increments(r, lock(r, w[2], w[3]), w[4], w[5], Integer.parseInt(w[6])));
            case "stamped":
                // stamped KIND NAME COUNTER INSIDE ITERATIONS: as incr, and
                // when each hold began (µs): "<overlaps>:<µs>,<µs>,..."
                return stamped(r, lock(r, w[2], w[3]), w[4], w[5], Integer.parseInt(w[6]));
            case "incr_held":
                // incr_held COUNTER INSIDE: one increment under a lock this
                // thread already holds (taken by lock/try_lock)
                return String.valueOf(incrementOnce(r.getBucket(w[2], StringCodec.INSTANCE),
                        r.getAtomicLong(w[3])));
            case "sem_set":
                return String.valueOf(r.getSemaphore(w[2]).trySetPermits(Integer.parseInt(w[3])));
            case "acquire":
                r.getSemaphore(w[2]).acquire(Integer.parseInt(w[3]));
                return "-";
            case "try_acquire":
                return String.valueOf(r.getSemaphore(w[2]).tryAcquire(
                        Integer.parseInt(w[3]), java.time.Duration.ofMillis(Long.parseLong(w[4]))));
            case "release":
                r.getSemaphore(w[2]).release(Integer.parseInt(w[3]));
                return "-";
            case "available":
                return String.valueOf(r.getSemaphore(w[2]).availablePermits());
            case "sem_incr":
                // sem_incr SEM INSIDE MAX ITERATIONS
                return String.valueOf(semaphoreRounds(r, r.getSemaphore(w[2]), w[3],
                        Long.parseLong(w[4]), Integer.parseInt(w[5])));
            case "pset":
                return String.valueOf(r.getPermitExpirableSemaphore(w[2]).trySetPermits(Integer.parseInt(w[3])));
            case "pacquire":
                return r.getPermitExpirableSemaphore(w[2]).acquire(Long.parseLong(w[3]), TimeUnit.MILLISECONDS);
            case "ptry_acquire": {
                String id = r.getPermitExpirableSemaphore(w[2])
                        .tryAcquire(Long.parseLong(w[3]), Long.parseLong(w[4]), TimeUnit.MILLISECONDS);
                return id == null ? "-" : id;
            }
            case "prelease":
                r.getPermitExpirableSemaphore(w[2]).release(w[3]);
                return "-";
            case "ptry_release":
                return String.valueOf(r.getPermitExpirableSemaphore(w[2]).tryRelease(w[3]));
            case "pavailable":
                return String.valueOf(r.getPermitExpirableSemaphore(w[2]).availablePermits());
            case "latch_set":
                return String.valueOf(r.getCountDownLatch(w[2]).trySetCount(Long.parseLong(w[3])));
            case "count_down":
                r.getCountDownLatch(w[2]).countDown();
                return "-";
            case "await":
                return String.valueOf(r.getCountDownLatch(w[2]).await(Long.parseLong(w[3]), TimeUnit.MILLISECONDS));
            case "count":
                return String.valueOf(r.getCountDownLatch(w[2]).getCount());
            default:
                throw new IllegalArgumentException("unknown op " + w[1]);
        }
    }

    private static RLock lock(RedissonClient r, String kind, String name) {
        return switch (kind) {
            case "lock" -> r.getLock(name);
            case "fair" -> r.getFairLock(name);
            case "read" -> r.getReadWriteLock(name).readLock();
            case "write" -> r.getReadWriteLock(name).writeLock();
            case "fenced" -> r.getFencedLock(name);
            case "spin" -> r.getSpinLock(name);
            default -> throw new IllegalArgumentException("unknown lock kind " + kind);
        };
    }

    /**
     * Increments COUNTER (a plain GET then SET: a second holder inside would
     * lose an update) under the lock, ITERATIONS times; INSIDE is INCRed on
     * entry and DECRed on exit, so a value other than 1 on entry is an
     * overlap. Returns the overlaps seen.
     */
    private static long increments(RedissonClient r, RLock lock, String counter, String inside, int iterations) {
        RBucket<String> value = r.getBucket(counter, StringCodec.INSTANCE);
        RAtomicLong in = r.getAtomicLong(inside);
        long overlaps = 0;
        for (int i = 0; i < iterations; i++) {
            lock.lock();
            try {
                overlaps += incrementOnce(value, in);
            } finally {
                lock.unlock();
            }
        }
        return overlaps;
    }

    /**
     * As {@link #increments}, and notes when each hold began (wall-clock
     * µs, taken while holding, so ordered against the other side's own
     * notes taken inside their holds). Returns "overlaps:µs,µs,...".
     */
    private static String stamped(RedissonClient r, RLock lock, String counter, String inside, int iterations) {
        RBucket<String> value = r.getBucket(counter, StringCodec.INSTANCE);
        RAtomicLong in = r.getAtomicLong(inside);
        long overlaps = 0;
        StringBuilder stamps = new StringBuilder();
        for (int i = 0; i < iterations; i++) {
            lock.lock();
            try {
                if (i > 0) {
                    stamps.append(',');
                }
                stamps.append(micros());
                overlaps += incrementOnce(value, in);
            } finally {
                lock.unlock();
            }
        }
        return overlaps + ":" + stamps;
    }

    /** One GET-then-SET increment of VALUE; 1 if IN showed someone else inside, else 0. */
    private static long incrementOnce(RBucket<String> value, RAtomicLong in) {
        long overlap = in.incrementAndGet() != 1 ? 1 : 0;
        String current = value.get();
        long next = (current == null ? 0 : Long.parseLong(current)) + 1;
        Thread.yield();
        value.set(String.valueOf(next));
        in.decrementAndGet();
        return overlap;
    }

    /**
     * Takes one permit ITERATIONS times; INSIDE counts the permits out, and
     * more than MAX of them out at once is an over-grant. Returns the
     * over-grants seen.
     */
    private static long semaphoreRounds(RedissonClient r, RSemaphore semaphore, String inside, long max,
            int iterations) throws InterruptedException {
        RAtomicLong in = r.getAtomicLong(inside);
        long overGrants = 0;
        for (int i = 0; i < iterations; i++) {
            semaphore.acquire();
            try {
                if (in.incrementAndGet() > max) {
                    overGrants++;
                }
                Thread.yield();
                in.decrementAndGet();
            } finally {
                semaphore.release();
            }
        }
        return overGrants;
    }

    private static long micros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    private static String describe(Throwable e) {
        Throwable root = e;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        String text = root.getClass().getSimpleName() + ": " + root.getMessage();
        return text.replace('\n', ' ').replace('\r', ' ');
    }

    private static synchronized void reply(String line) {
        OUT.println(line);
        OUT.flush();
    }
}
