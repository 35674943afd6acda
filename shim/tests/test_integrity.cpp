// Tests of the verifying backend (integrity.hpp) through the engine, over the
// in-memory store of harness.hpp: trailers written, sizes seen without them,
// every read path verified, values without a trailer or damaged refused with
// MCS_E_CORRUPT after re-reads.  Built with -Dshim_tests=true.
#include "../src/engine/crc32c.hpp"
#include "../src/engine/integrity.hpp"
#include "../src/engine/two_threads.hpp"
#include "harness.hpp"

namespace {

// The in-memory store with byte ranges, registration without L1 bookkeeping,
// and a switch that makes lookups miss (a writer that raced past the check).
class RangeStore final : public MemStore {
public:
    std::atomic<bool> lookups_miss{false};
    std::atomic<int> range_calls{0};
    std::vector<int> exists(const mcs::StrVec &keys) override {
        if (lookups_miss) return std::vector<int>(keys.size(), 0);
        return MemStore::exists(keys);
    }
    int register_buffer(void *, size_t) override { return 0; }
    // Run once, right after the next read of a value returns (on the reading thread).
    std::function<void()> after_read;
    std::vector<int64_t> get_into(const mcs::StrVec &keys, const std::vector<void *> &bufs,
                                  const std::vector<size_t> &sizes) override {
        auto r = MemStore::get_into(keys, bufs, sizes);
        read_done();
        return r;
    }
    std::vector<int64_t> get_into_parts(const mcs::StrVec &keys, const std::vector<void *> &bufs,
                                        const std::vector<size_t> &sizes,
                                        const std::vector<size_t> &first) override {
        auto r = MemStore::get_into_parts(keys, bufs, sizes, first);
        read_done();
        return r;
    }
    mcs::HeldValues get_buffers(const mcs::StrVec &keys) override {
        auto r = MemStore::get_buffers(keys);
        read_done();
        return r;
    }
    void read_done() {
        if (!after_read) return;
        auto fn = std::move(after_read);
        after_read = nullptr;
        fn();
    }
    std::vector<std::vector<std::vector<int64_t>>> get_into_ranges(
        const std::vector<void *> &bufs, const std::vector<mcs::StrVec> &keys,
        const std::vector<std::vector<std::vector<size_t>>> &dst,
        const std::vector<std::vector<std::vector<size_t>>> &src,
        const std::vector<std::vector<std::vector<size_t>>> &sizes) override {
        range_calls++;
        std::lock_guard<std::mutex> lk(mu);
        std::vector<std::vector<std::vector<int64_t>>> out(bufs.size());
        for (size_t b = 0; b < bufs.size(); b++)
            for (size_t k = 0; k < keys[b].size(); k++) {
                out[b].emplace_back();
                auto it = data.find(keys[b][k]);
                for (size_t r = 0; r < src[b][k].size(); r++) {
                    if (it == data.end()) {
                        out[b][k].push_back(-704);
                    } else if (src[b][k][r] + sizes[b][k][r] > it->second.size()) {
                        out[b][k].push_back(-600);
                    } else {
                        std::memcpy(static_cast<char *>(bufs[b]) + dst[b][k][r],
                                    it->second.data() + src[b][k][r], sizes[b][k][r]);
                        out[b][k].push_back(int64_t(sizes[b][k][r]));
                    }
                }
            }
        return out;
    }
};

struct Verifying {
    RangeStore *store;
    mcs::Backend *verifier;  // owned by the engine
    std::shared_ptr<mcs::IntegrityCounters> counters = std::make_shared<mcs::IntegrityCounters>();
    std::unique_ptr<mcs::Engine> engine;
    Verifying() {
        auto s = std::make_unique<RangeStore>();
        store = s.get();
        mcs_lanes lanes{};
        auto v = mcs::make_integrity_backend(std::move(s), counters);
        verifier = v.get();
        engine = std::make_unique<mcs::Engine>(std::move(v), &lanes);
    }
    int run(int op, const Keys &k, void *const *bufs, const uint64_t *sizes, int64_t *res,
            int flags = 0, const uint32_t *parts = nullptr) {
        mcs_batch b = make_batch(op, k, bufs, sizes, res, flags);
        b.part_counts = parts;
        try {
            return engine->submit(b, true, nullptr);
        } catch (const mcs::Error &e) {
            return e.code;
        }
    }
    std::string put(const std::string &key, const std::string &value, int op = MCS_OP_UPSERT) {
        Keys k({key});
        void *bufs[] = {const_cast<char *>(value.data())};
        uint64_t sizes[] = {value.size()};
        int64_t res[1] = {-1};
        CHECK(run(op, k, bufs, sizes, res) == MCS_OK);
        CHECK(res[0] == 0);
        std::lock_guard<std::mutex> lk(store->mu);
        return store->data[key];
    }
    int64_t get(const std::string &key, std::string &out, size_t cap) {
        Keys k({key});
        out.assign(cap, '\0');
        void *bufs[] = {out.data()};
        uint64_t sizes[] = {cap};
        int64_t res[1] = {-1};
        CHECK(run(MCS_OP_GET, k, bufs, sizes, res) == MCS_OK);
        if (res[0] >= 0) out.resize(size_t(res[0]));
        return res[0];
    }
};

std::string value_of(size_t n, char seed) {
    std::string v(n, '\0');
    for (size_t i = 0; i < n; i++) v[i] = char(seed + i * 7);
    return v;
}

void test_a_write_stores_the_value_then_its_trailer() {
    Verifying f;
    std::string v = value_of(1000, 'a');
    std::string stored = f.put("k", v);
    CHECK(stored.size() == v.size() + mcs::kTrailerSize);
    CHECK(stored.compare(0, v.size(), v) == 0);
    mcs::Trailer t;
    std::memcpy(&t, stored.data() + v.size(), sizeof t);
    CHECK(t.magic == mcs::kTrailerMagic);
    CHECK(mcs::trailer_verifies(t, "k", v.data(), v.size()));
    // bound to its key: the same bytes and trailer under another key do not verify
    CHECK(!mcs::trailer_verifies(t, "k2", v.data(), v.size()));
    // a version-1 trailer (the value's CRC alone) still verifies, under any key
    mcs::Trailer v1{mcs::kTrailerMagicV1, mcs::crc32c(0, v.data(), v.size()), 7};
    CHECK(mcs::trailer_verifies(v1, "any", v.data(), v.size()));
    std::string stored2 = f.put("k2", v);
    mcs::Trailer t2;
    std::memcpy(&t2, stored2.data() + v.size(), sizeof t2);
    CHECK(t2.nonce != t.nonce);  // each write its own
    CHECK(f.counters->written == 2);
}

void test_reads_return_the_values_own_size_whatever_the_buffer() {
    Verifying f;
    std::string v = value_of(4096, 'b');
    f.put("k", v);
    // Twice each: the second read of a capacity tries first what fitted the first.
    for (int round = 0; round < 2; round++)
        for (size_t cap : {size_t(4096), size_t(4100), size_t(4112), size_t(4113), size_t(65536)}) {
            std::string got;
            CHECK(f.get("k", got, cap) == 4096);
            CHECK(got == v);
        }
    std::string other = value_of(65536, 'z');  // a value of the scratch buffer's own size
    f.put("k65536", other);
    std::string got;
    CHECK(f.get("k65536", got, 65536) == 65536);
    CHECK(got == other);
    std::string small;
    CHECK(f.get("k", small, 4095) == -600);  // too small, as Mooncake says
    Keys k({"k"});
    int64_t res[1] = {-1};
    CHECK(f.run(MCS_OP_SIZE, k, nullptr, nullptr, res) == MCS_OK);
    CHECK(res[0] == 4096);
    CHECK(f.counters->failed == 0);
}

void test_buffered_and_multi_part_reads_verify() {
    Verifying f;
    std::string v = value_of(3000, 'c');
    f.put("k", v);
    Keys k({"k"});
    int64_t res[1] = {-1};
    const void *vals[1] = {nullptr};
    mcs_batch b = make_batch(MCS_OP_GET_BUFFER, k, nullptr, nullptr, res);
    b.values = vals;
    uint64_t id = 0;
    CHECK(f.engine->submit(b, true, &id) == MCS_OK);
    CHECK(res[0] == 3000);
    CHECK(vals[0] && std::memcmp(vals[0], v.data(), 3000) == 0);
    f.engine->release(id);
    // Two parts that add up to the value, and a tail part anywhere in it.
    std::string a(1000, '\0'), z(2000, '\0');
    void *bufs[] = {a.data(), z.data()};
    uint64_t sizes[] = {1000, 2000};
    uint32_t parts[] = {2};
    CHECK(f.run(MCS_OP_GET, k, bufs, sizes, res, 0, parts) == MCS_OK);
    CHECK(res[0] == 3000);
    CHECK(a + z == v);
    std::string big(8000, '\0'), tail(100, '\0');
    void *bufs2[] = {big.data(), tail.data()};
    uint64_t sizes2[] = {8000, 100};
    CHECK(f.run(MCS_OP_GET, k, bufs2, sizes2, res, MCS_FLAG_TAIL_PART, parts) == MCS_OK);
    CHECK(res[0] == 3000);
    CHECK(big.substr(0, 2900) + tail == v);
}

void test_a_value_without_a_trailer_is_corrupt_not_returned() {
    Verifying f;
    {
        std::lock_guard<std::mutex> lk(f.store->mu);
        f.store->data["plain"] = value_of(5000, 'd');  // written by a client that does not verify
        f.store->data["tiny"] = "abc";
    }
    std::string got;
    CHECK(f.get("plain", got, 5000) == MCS_E_CORRUPT);
    CHECK(f.get("plain", got, 1 << 20) == MCS_E_CORRUPT);
    CHECK(f.get("tiny", got, 100) == MCS_E_CORRUPT);
    // Sizes are refused as the reads are, whatever the stored length.
    Keys k({"tiny", "plain"});
    int64_t res[2] = {-1, -1};
    CHECK(f.run(MCS_OP_SIZE, k, nullptr, nullptr, res) == MCS_OK);
    CHECK(res[0] == MCS_E_CORRUPT);
    CHECK(res[1] == MCS_E_CORRUPT);
    CHECK(f.counters->retried >= 4);
    CHECK(f.counters->failed >= 3);
}

void test_a_damaged_byte_fails_every_read_path() {
    Verifying f;
    std::string v = value_of(2048, 'e');
    f.put("k", v);
    {
        std::lock_guard<std::mutex> lk(f.store->mu);
        f.store->data["k"][1234] ^= 0x10;
    }
    std::string got;
    CHECK(f.get("k", got, 2048) == MCS_E_CORRUPT);
    Keys k({"k"});
    int64_t res[1] = {-1};
    const void *vals[1] = {nullptr};
    mcs_batch b = make_batch(MCS_OP_GET_BUFFER, k, nullptr, nullptr, res);
    b.values = vals;
    uint64_t id = 0;
    CHECK(f.engine->submit(b, true, &id) == MCS_OK);
    CHECK(res[0] == MCS_E_CORRUPT);
    CHECK(vals[0] == nullptr);
    f.engine->release(id);
}

void test_a_read_that_verifies_on_a_retry_is_returned() {
    Verifying f;
    std::string v = value_of(1 << 16, 'f');
    f.put("k", v);
    std::string good;
    {
        std::lock_guard<std::mutex> lk(f.store->mu);
        good = f.store->data["k"];
        f.store->data["k"][10] ^= 1;  // torn: heals while the reader retries
    }
    // Healed right after the first read (which saw it torn) returns, whatever the timing:
    // the re-read finds it whole.
    f.store->after_read = [&] {
        std::lock_guard<std::mutex> lk(f.store->mu);
        f.store->data["k"] = good;
    };
    std::string got;
    int64_t r = f.get("k", got, v.size());
    CHECK(r == int64_t(v.size()));
    CHECK(got == v);
    CHECK(f.counters->retried >= 1);
    CHECK(f.counters->failed == 0);
}

void test_skip_existing_puts_tell_the_first_writer_from_the_trailer() {
    Verifying f;
    std::string first = value_of(5000, 'g'), second = value_of(5000, 'h');
    Keys k({"k", "other"});
    void *bufs[] = {first.data(), first.data()};
    uint64_t sizes[] = {5000, 5000};
    int64_t res[2] = {-1, -1};
    CHECK(f.run(MCS_OP_PUT, k, bufs, sizes, res, MCS_FLAG_SKIP_EXISTING) == MCS_OK);
    CHECK(res[0] == 0 && res[1] == 0);  // written, and confirmed ours
    CHECK(f.store->range_calls == 1);
    // A writer the lookup missed: Mooncake keeps the first value, the trailer tells.
    f.store->lookups_miss = true;
    Keys k1({"k"});
    void *bufs2[] = {second.data()};
    uint64_t sizes1[] = {5000};
    CHECK(f.run(MCS_OP_PUT, k1, bufs2, sizes1, res, MCS_FLAG_SKIP_EXISTING) == MCS_OK);
    CHECK(res[0] == MCS_PUT_EXISTED);
    // ... also when the value it lost to has another size, and through parts.
    std::string shorter = value_of(100, 'i');
    void *bufs3[] = {shorter.data(), shorter.data()};
    uint64_t sizes3[] = {50, 50};
    uint32_t parts[] = {2};
    CHECK(f.run(MCS_OP_PUT, k1, bufs3, sizes3, res, MCS_FLAG_SKIP_EXISTING, parts) == MCS_OK);
    CHECK(res[0] == MCS_PUT_EXISTED);
    std::string got;
    CHECK(f.get("k", got, 5000) == 5000);
    CHECK(got == first);
}

void test_byte_ranges_stop_at_the_values_own_end() {
    Verifying f;
    f.put("k", "0123456789abcdef");  // 16 bytes, then the trailer
    {
        std::lock_guard<std::mutex> lk(f.store->mu);
        f.store->data["plain"] = value_of(64, 'p');
    }
    char buf[64] = {};
    mcs::StrVec keys{"k", "plain", "none"};
    std::vector<std::vector<std::vector<size_t>>> dst{{{0, 20, 40, 50}, {0}, {0}}},
        src{{{10, 0, 16, 17}, {0}, {0}}}, len{{{16, 16, 0, 0}, {4}, {4}}};
    auto r = f.verifier->get_into_ranges({buf}, {keys}, dst, src, len);
    CHECK(r.size() == 1 && r[0].size() == 3);
    // Past the end (10+16 > 16, 17 > 16): -600 and nothing written; up to it: read.
    CHECK((r[0][0] == std::vector<int64_t>{-600, 16, 0, -600}));
    CHECK(std::string(buf + 20, 16) == "0123456789abcdef");
    CHECK(std::string(buf, 20) == std::string(20, '\0'));
    CHECK(std::string(buf + 36, 28) == std::string(28, '\0'));
    CHECK((r[0][1] == std::vector<int64_t>{MCS_E_CORRUPT}));  // no trailer: refused
    CHECK((r[0][2] == std::vector<int64_t>{-704}));
}

// A batch of several MiB is checked on two threads (two_threads.hpp): every
// value of it verifies on each path, and a damaged byte in either thread's
// half is refused, the rest returned.
void test_a_large_batch_verifies_on_both_threads() {
    Verifying f;
    constexpr size_t kN = 12, kSize = size_t(1) << 20;  // 12 MiB: two threads
    static_assert(kN * kSize >= mcs::kTwoThreadsFrom);
    std::vector<std::string> names, values;
    for (size_t i = 0; i < kN; i++) {
        names.push_back("big" + std::to_string(i));
        values.push_back(value_of(kSize, char('a' + i)));
    }
    Keys k(names);
    std::vector<void *> bufs;
    std::vector<uint64_t> sizes(kN, kSize);
    for (auto &v : values) bufs.push_back(v.data());
    std::vector<int64_t> res(kN, -1);
    CHECK(f.run(MCS_OP_UPSERT, k, bufs.data(), sizes.data(), res.data()) == MCS_OK);
    for (size_t i = 0; i < kN; i++) {
        CHECK(res[i] == 0);
        std::lock_guard<std::mutex> lk(f.store->mu);
        const std::string &stored = f.store->data[names[i]];
        mcs::Trailer t;
        std::memcpy(&t, stored.data() + kSize, sizeof t);
        CHECK(mcs::trailer_verifies(t, names[i], values[i].data(), kSize));
    }
    {
        std::lock_guard<std::mutex> lk(f.store->mu);
        f.store->data[names[1]][77] ^= 0x01;       // the first thread's half
        f.store->data[names[kN - 2]][99] ^= 0x40;  // the second's
    }
    auto damaged = [&](size_t i) { return i == 1 || i == kN - 2; };
    std::vector<std::string> out(kN, std::string(kSize, '\0'));
    std::vector<void *> obufs;
    for (auto &o : out) obufs.push_back(o.data());
    CHECK(f.run(MCS_OP_GET, k, obufs.data(), sizes.data(), res.data()) == MCS_OK);
    for (size_t i = 0; i < kN; i++) {
        CHECK(res[i] == (damaged(i) ? int64_t(MCS_E_CORRUPT) : int64_t(kSize)));
        if (!damaged(i)) CHECK(out[i] == values[i]);
    }
    std::vector<const void *> vals(kN, nullptr);
    mcs_batch b = make_batch(MCS_OP_GET_BUFFER, k, nullptr, nullptr, res.data());
    b.values = vals.data();
    uint64_t id = 0;
    CHECK(f.engine->submit(b, true, &id) == MCS_OK);
    for (size_t i = 0; i < kN; i++) {
        CHECK(res[i] == (damaged(i) ? int64_t(MCS_E_CORRUPT) : int64_t(kSize)));
        if (!damaged(i)) CHECK(vals[i] && std::memcmp(vals[i], values[i].data(), kSize) == 0);
    }
    f.engine->release(id);
}

}  // namespace

int main() {
    return run_tests({
        {"a_write_stores_the_value_then_its_trailer",
         test_a_write_stores_the_value_then_its_trailer},
        {"reads_return_the_values_own_size_whatever_the_buffer",
         test_reads_return_the_values_own_size_whatever_the_buffer},
        {"buffered_and_multi_part_reads_verify", test_buffered_and_multi_part_reads_verify},
        {"a_value_without_a_trailer_is_corrupt_not_returned",
         test_a_value_without_a_trailer_is_corrupt_not_returned},
        {"a_damaged_byte_fails_every_read_path", test_a_damaged_byte_fails_every_read_path},
        {"a_read_that_verifies_on_a_retry_is_returned",
         test_a_read_that_verifies_on_a_retry_is_returned},
        {"skip_existing_puts_tell_the_first_writer_from_the_trailer",
         test_skip_existing_puts_tell_the_first_writer_from_the_trailer},
        {"byte_ranges_stop_at_the_values_own_end", test_byte_ranges_stop_at_the_values_own_end},
        {"a_large_batch_verifies_on_both_threads", test_a_large_batch_verifies_on_both_threads},
    });
}
