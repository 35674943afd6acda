// The verifying backend (integrity.hpp): trailers on the way in, checks on
// the way out, over any other Backend.  Values go to the store as two parts,
// [the caller's bytes][16-byte trailer], so nothing is copied; the CRC is
// computed on the calling worker thread (Python has released the GIL), and a
// batch of several MiB shares it with one more thread (two_threads.hpp).
#include "integrity.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "crc32c.hpp"
#include "two_threads.hpp"

namespace mcs {

uint32_t key_seed(const std::string &key) {
    return crc32c(0, key.data(), key.size());
}

bool trailer_verifies(const Trailer &t, const std::string &key, const void *value, size_t n) {
    if (t.magic == kTrailerMagic) return t.crc == crc32c(key_seed(key), value, n);
    return t.magic == kTrailerMagicV1 && t.crc == crc32c(0, value, n);
}

namespace {

// The bytes of key i's parts [first[i], first[i + 1]).
uint64_t parts_bytes(const std::vector<size_t> &sizes, const std::vector<size_t> &first, size_t i) {
    uint64_t n = 0;
    for (size_t j = first[i]; j < first[i + 1]; j++) n += sizes[j];
    return n;
}

// `crc` carried on over key i's parts, in order.
uint32_t parts_crc(uint32_t crc, const std::vector<void *> &bufs, const std::vector<size_t> &sizes,
                   const std::vector<size_t> &first, size_t i) {
    for (size_t j = first[i]; j < first[i + 1]; j++) crc = crc32c(crc, bufs[j], sizes[j]);
    return crc;
}

// A read that did not verify is read again after these pauses (ms).
constexpr int kRetryPauseMs[] = {0, 1, 4, 10};

// Marks a key whose bytes arrived but did not verify (never a store code).
constexpr int64_t kBad = INT64_MIN;

uint64_t random_base() {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
}

class IntegrityBackend final : public Backend {
public:
    IntegrityBackend(std::unique_ptr<Backend> inner, std::shared_ptr<IntegrityCounters> counters)
        : inner_(std::move(inner)), n_(std::move(counters)), base_(random_base()) {}

    // ----------------------------------------------------------- writes

    std::vector<int> put_from(const StrVec &keys, const std::vector<void *> &bufs,
                              const std::vector<size_t> &sizes, const ReplicaOptions &opts,
                              const StrVec *group_ids, bool upsert) override {
        std::vector<size_t> first(keys.size() + 1);
        for (size_t i = 0; i <= keys.size(); i++) first[i] = i;
        return put_from_parts(keys, bufs, sizes, first, opts, group_ids, upsert);
    }

    int64_t put_one(const std::string &key, void *buf, size_t size, const ReplicaOptions &opts,
                    bool upsert) override {
        return put_from(StrVec{key}, {buf}, {size}, opts, nullptr, upsert).at(0);
    }

    std::vector<int> put_from_parts(const StrVec &keys, const std::vector<void *> &bufs,
                                    const std::vector<size_t> &sizes,
                                    const std::vector<size_t> &first, const ReplicaOptions &opts,
                                    const StrVec *group_ids, bool upsert) override {
        std::vector<Trailer> tr;
        return write(keys, bufs, sizes, first, opts, group_ids, upsert, tr);
    }

    // Written, then only each key's trailer read back (16 bytes at the end of
    // the value this call wrote): a nonce not this write's, a value of another
    // size or one still being written (-703) means another writer won.  A key
    // gone meanwhile (the writer it lost to failed) is written again.
    std::vector<int> put_first_writer(const StrVec &keys, const std::vector<void *> &bufs,
                                      const std::vector<size_t> &sizes,
                                      const std::vector<size_t> *first, const ReplicaOptions &opts,
                                      const StrVec *group_ids) override {
        std::vector<size_t> f;
        if (first) {
            f = *first;
        } else {
            f.resize(keys.size() + 1);
            for (size_t i = 0; i <= keys.size(); i++) f[i] = i;
        }
        std::vector<int> res(keys.size(), MCS_E_INTERNAL);
        std::vector<size_t> todo(keys.size());
        for (size_t i = 0; i < keys.size(); i++) todo[i] = i;
        for (int round = 0; round < 3 && !todo.empty(); round++) {
            StrVec k, g;
            std::vector<void *> b;
            std::vector<size_t> s, f2{0}, total;
            for (size_t i : todo) {
                k.push_back(keys[i]);
                if (group_ids) g.push_back((*group_ids)[i]);
                size_t t = 0;
                for (size_t j = f[i]; j < f[i + 1]; j++) {
                    b.push_back(bufs[j]);
                    s.push_back(sizes[j]);
                    t += sizes[j];
                }
                f2.push_back(b.size());
                total.push_back(t);
            }
            std::vector<Trailer> tr;
            std::vector<int> r = write(k, b, s, f2, opts, group_ids ? &g : nullptr, false, tr);
            if (r.size() != k.size()) return r;
            std::vector<size_t> again;
            std::vector<size_t> sent;  // positions in k that were written
            for (size_t j = 0; j < k.size(); j++) {
                res[todo[j]] = r[j];
                if (r[j] == 0) sent.push_back(j);
            }
            std::vector<int64_t> seen = read_trailers(k, sent, total, tr);
            for (size_t m = 0; m < sent.size(); m++) {
                const size_t j = sent[m];
                const int64_t v = seen[m];
                if (v == 1) continue;  // ours
                if (v == kObjectNotFound)
                    again.push_back(todo[j]);
                else if (v == 0 || v == -703 || v == -600)
                    res[todo[j]] = MCS_PUT_EXISTED;
                else
                    res[todo[j]] = int(v);
            }
            todo = std::move(again);
            if (!todo.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return res;
    }
    bool confirms_first_writer() const override { return true; }

    void check_parts(int op) override { inner_->check_parts(op); }
    void check_replica(const ReplicaOptions &o) override { inner_->check_replica(o); }

    // ------------------------------------------------------------ reads

    std::vector<int64_t> get_into(const StrVec &keys, const std::vector<void *> &bufs,
                                  const std::vector<size_t> &sizes) override {
        return with_retries(keys.size(), [&](const std::vector<size_t> &idx) {
            return read_whole(pick(keys, idx), pick(bufs, idx), pick(sizes, idx));
        });
    }

    int64_t get_one(const std::string &key, void *buf, size_t size) override {
        return get_into(StrVec{key}, {buf}, {size}).at(0);
    }

    std::vector<int64_t> get_into_parts(const StrVec &keys, const std::vector<void *> &bufs,
                                        const std::vector<size_t> &sizes,
                                        const std::vector<size_t> &first) override {
        return with_retries(keys.size(), [&](const std::vector<size_t> &idx) {
            StrVec k;
            std::vector<void *> b;
            std::vector<size_t> s, f{0};
            for (size_t i : idx) {
                k.push_back(keys[i]);
                b.insert(b.end(), bufs.begin() + long(first[i]), bufs.begin() + long(first[i + 1]));
                s.insert(s.end(), sizes.begin() + long(first[i]),
                         sizes.begin() + long(first[i + 1]));
                f.push_back(b.size());
            }
            return read_parts(k, b, s, f);
        });
    }

    HeldValues get_buffers(const StrVec &keys) override {
        HeldValues out = inner_->get_buffers(keys);
        if (out.sizes.size() != keys.size() || out.values.size() != keys.size()) return out;
        auto holds = std::make_shared<std::vector<std::shared_ptr<void>>>();
        holds->push_back(out.hold);
        std::vector<size_t> bad = check_held(keys, out);
        for (int pause : kRetryPauseMs) {
            if (bad.empty()) break;
            n_->retried += bad.size();
            if (pause) std::this_thread::sleep_for(std::chrono::milliseconds(pause));
            HeldValues again = inner_->get_buffers(pick(keys, bad));
            if (again.sizes.size() != bad.size() || again.values.size() != bad.size()) break;
            holds->push_back(again.hold);
            std::vector<size_t> still = check_held(pick(keys, bad), again);
            std::vector<char> failed(bad.size(), 0);
            for (size_t s : still) failed[s] = 1;
            std::vector<size_t> next;
            for (size_t j = 0; j < bad.size(); j++) {
                out.values[bad[j]] = again.values[j];
                out.sizes[bad[j]] = again.sizes[j];
                if (failed[j]) next.push_back(bad[j]);
            }
            bad = std::move(next);
        }
        for (size_t i : bad) {
            out.sizes[i] = MCS_E_CORRUPT;
            out.values[i] = nullptr;
            n_->failed++;
        }
        out.hold = holds;
        return out;
    }

    // The value's own size, once the 16 bytes at the end of what is stored
    // read as a trailer (its magic: the CRC needs the whole value).  A value
    // without one, written without the option or shorter than a trailer, is
    // refused as its reads are: re-read after the same pauses, then
    // MCS_E_CORRUPT.
    int64_t size(const std::string &key) override {
        for (size_t attempt = 0;; attempt++) {
            const int64_t s = inner_->size(key);
            if (s < 0) return s;
            int64_t v = kBad;
            if (s >= int64_t(kTrailerSize)) {
                const size_t at = size_t(s) - kTrailerSize;
                std::vector<Trailer> t(1);
                v = read_tails(StrVec{key}, {at}, t).at(0);
                if (v == int64_t(kTrailerSize))
                    v = trailer_magic(t[0].magic) ? int64_t(at) : kBad;
                else if (v == -600 || v >= 0)
                    v = kBad;  // the value changed size meanwhile: sized again
            }
            if (v != kBad) return v;
            if (attempt == std::size(kRetryPauseMs)) {
                n_->failed++;
                return MCS_E_CORRUPT;
            }
            n_->retried++;
            if (int pause = kRetryPauseMs[attempt])
                std::this_thread::sleep_for(std::chrono::milliseconds(pause));
        }
    }

    // ------------------------------------------------- passed through

    std::vector<int> exists(const StrVec &keys) override { return inner_->exists(keys); }
    int64_t exists_one(const std::string &key) override { return inner_->exists_one(key); }
    std::vector<int> remove(const StrVec &keys, bool force) override {
        return inner_->remove(keys, force);
    }
    int64_t remove_one(const std::string &key, bool force) override {
        return inner_->remove_one(key, force);
    }
    int64_t remove_all(bool force) override { return inner_->remove_all(force); }
    int64_t remove_by_regex(const std::string &p, bool force) override {
        return inner_->remove_by_regex(p, force);
    }
    int health_check() override { return inner_->health_check(); }
    std::vector<std::string> replica_desc(const StrVec &keys) override {
        return inner_->replica_desc(keys);
    }
    int register_buffer(void *p, size_t s) override { return inner_->register_buffer(p, s); }
    int unregister_buffer(void *p) override { return inner_->unregister_buffer(p); }
    // Byte ranges are the caller's own reads of a value's bytes, not
    // verified, but checked against the value's own size (size(): a value
    // without a trailer is refused).  A range past it is answered -600
    // without being read, as Mooncake answers a range past a value's end;
    // the others are read as they are.  A key that cannot be sized is left
    // to Mooncake's answer.
    std::vector<std::vector<std::vector<int64_t>>> get_into_ranges(
        const std::vector<void *> &bufs, const std::vector<StrVec> &keys,
        const std::vector<std::vector<std::vector<size_t>>> &dst,
        const std::vector<std::vector<std::vector<size_t>>> &src,
        const std::vector<std::vector<std::vector<size_t>>> &sizes) override {
        using Nest = std::vector<std::vector<std::vector<size_t>>>;
        std::unordered_map<std::string, int64_t> own;
        const size_t nb = keys.size();
        std::vector<std::vector<std::vector<int64_t>>> out(nb);
        Nest d2(nb), s2(nb), z2(nb);
        bool any = false;
        for (size_t b = 0; b < nb; b++) {
            out[b].resize(keys[b].size());
            d2[b].resize(keys[b].size());
            s2[b].resize(keys[b].size());
            z2[b].resize(keys[b].size());
            for (size_t j = 0; j < keys[b].size(); j++) {
                const size_t m = dst[b][j].size();
                if (src[b][j].size() != m || sizes[b][j].size() != m) return {};
                out[b][j].assign(m, MCS_E_INTERNAL);
                if (!m) continue;
                auto found = own.find(keys[b][j]);
                if (found == own.end()) found = own.emplace(keys[b][j], size(keys[b][j])).first;
                const int64_t v = found->second;
                for (size_t k = 0; k < m; k++) {
                    const size_t from = src[b][j][k], len = sizes[b][j][k];
                    if (v == MCS_E_CORRUPT) {
                        out[b][j][k] = MCS_E_CORRUPT;
                    } else if (v >= 0 && (from > uint64_t(v) || len > uint64_t(v) - from)) {
                        out[b][j][k] = -600;
                    } else {
                        d2[b][j].push_back(dst[b][j][k]);
                        s2[b][j].push_back(from);
                        z2[b][j].push_back(len);
                        any = true;
                    }
                }
            }
        }
        if (!any) return out;
        auto r = inner_->get_into_ranges(bufs, keys, d2, s2, z2);
        for (size_t b = 0; b < nb; b++) {
            for (size_t j = 0; j < keys[b].size(); j++) {
                size_t q = 0;  // position among the ranges passed on
                for (int64_t &v : out[b][j]) {
                    if (v != MCS_E_INTERNAL) continue;
                    const bool have = b < r.size() && j < r[b].size() && q < r[b][j].size();
                    v = have ? r[b][j][q] : int64_t(-600);
                    q++;
                }
            }
        }
        return out;
    }
    void teardown() override { inner_->teardown(); }
    std::chrono::milliseconds teardown_wait() const override { return inner_->teardown_wait(); }
    bool teardown_before_exit() const override { return inner_->teardown_before_exit(); }
    void skip_teardown() override { inner_->skip_teardown(); }
    std::string hostname() override { return inner_->hostname(); }

private:
    // The put itself: each key's parts, then its trailer (into `tr`).
    std::vector<int> write(const StrVec &keys, const std::vector<void *> &bufs,
                           const std::vector<size_t> &sizes, const std::vector<size_t> &first,
                           const ReplicaOptions &opts, const StrVec *group_ids, bool upsert,
                           std::vector<Trailer> &tr) {
        if (upsert) inner_->check_parts(MCS_OP_UPSERT);
        const size_t n = keys.size();
        tr.assign(n, Trailer{});
        std::vector<void *> b2;
        std::vector<size_t> s2, f2{0};
        b2.reserve(bufs.size() + n);
        s2.reserve(bufs.size() + n);
        std::vector<uint32_t> crcs(n);
        for_each_on_two_threads(
            n, [&](size_t i) { return parts_bytes(sizes, first, i); },
            [&](size_t i) { crcs[i] = parts_crc(key_seed(keys[i]), bufs, sizes, first, i); });
        for (size_t i = 0; i < n; i++) {
            for (size_t j = first[i]; j < first[i + 1]; j++) {
                b2.push_back(bufs[j]);
                s2.push_back(sizes[j]);
            }
            tr[i] = Trailer{kTrailerMagic, crcs[i], base_ + seq_.fetch_add(1)};
            b2.push_back(&tr[i]);
            s2.push_back(kTrailerSize);
            f2.push_back(b2.size());
        }
        std::vector<int> r = inner_->put_from_parts(keys, b2, s2, f2, opts, group_ids, upsert);
        for (int v : r)
            if (v == 0) n_->written++;
        return r;
    }

    // For keys[sent[m]], written with trailer tr[sent[m]] after total[sent[m]]
    // bytes: 1 if the key holds that trailer now, 0 if another, else the
    // store's code for the 16-byte range (-600: the value ends elsewhere).
    // Read through a scratch region registered with the store once.
    std::vector<int64_t> read_trailers(const StrVec &keys, const std::vector<size_t> &sent,
                                       const std::vector<size_t> &total,
                                       const std::vector<Trailer> &tr) {
        StrVec k;
        std::vector<size_t> at;
        for (size_t j : sent) {
            k.push_back(keys[j]);
            at.push_back(total[j]);
        }
        std::vector<Trailer> seen(sent.size());
        std::vector<int64_t> out = read_tails(k, at, seen);
        for (size_t m = 0; m < sent.size(); m++) {
            const Trailer &t = seen[m], &mine = tr[sent[m]];
            int64_t &v = out[m];
            if (v == int64_t(kTrailerSize))
                v = t.magic == mine.magic && t.nonce == mine.nonce && t.crc == mine.crc;
            else if (v >= 0)
                v = MCS_E_INTERNAL;
        }
        return out;
    }

    // The 16 bytes at offset at[i] of keys[i] into out[i]: per key the
    // store's answer for that range (16, or a negative code; -600: the value
    // ends before).  Read through a scratch region registered with the store
    // once.
    std::vector<int64_t> read_tails(const StrVec &keys, const std::vector<size_t> &at,
                                    std::vector<Trailer> &out) {
        std::vector<int64_t> res;
        res.reserve(keys.size());
        std::lock_guard<std::mutex> lk(scratch_mu_);
        if (!scratch_) {
            auto mem = std::make_unique<Trailer[]>(kScratchSlots);
            int rc = inner_->register_buffer(mem.get(), kScratchSlots * kTrailerSize);
            if (rc) throw Error(rc, "registering the trailer reads' scratch buffer failed");
            scratch_ = std::move(mem);
        }
        for (size_t from = 0; from < keys.size(); from += kScratchSlots) {
            const size_t m = std::min(kScratchSlots, keys.size() - from);
            std::vector<StrVec> k{StrVec{}};
            std::vector<std::vector<std::vector<size_t>>> dst(1), src(1), len(1);
            for (size_t q = 0; q < m; q++) {
                k[0].push_back(keys[from + q]);
                dst[0].push_back({q * kTrailerSize});
                src[0].push_back({at[from + q]});
                len[0].push_back({kTrailerSize});
            }
            auto r = inner_->get_into_ranges({scratch_.get()}, k, dst, src, len);
            for (size_t q = 0; q < m; q++) {
                const int64_t v = (r.size() == 1 && r[0].size() == m && r[0][q].size() == 1)
                                      ? r[0][q][0]
                                      : int64_t(MCS_E_INTERNAL);
                if (v == int64_t(kTrailerSize)) out[from + q] = scratch_[q];
                res.push_back(v);
            }
        }
        return res;
    }

    static constexpr size_t kScratchSlots = 4096;

    template <class T>
    static std::vector<T> pick(const std::vector<T> &v, const std::vector<size_t> &idx) {
        std::vector<T> out;
        out.reserve(idx.size());
        for (size_t i : idx) out.push_back(v[i]);
        return out;
    }

    // Runs `round` over all n keys, then again over those that did not
    // verify (kBad), after the pauses; what still does not: MCS_E_CORRUPT.
    template <class Round>
    std::vector<int64_t> with_retries(size_t n, Round &&round) {
        std::vector<size_t> idx(n);
        for (size_t i = 0; i < n; i++) idx[i] = i;
        std::vector<int64_t> res(n, MCS_E_INTERNAL);
        for (size_t attempt = 0;; attempt++) {
            std::vector<int64_t> r = round(idx);
            if (r.size() != idx.size()) return r;  // the engine reports the count
            std::vector<size_t> bad;
            for (size_t j = 0; j < idx.size(); j++) {
                res[idx[j]] = r[j];
                if (r[j] == kBad) bad.push_back(idx[j]);
            }
            if (bad.empty()) return res;
            if (attempt == std::size(kRetryPauseMs)) {
                for (size_t i : bad) res[i] = MCS_E_CORRUPT;
                n_->failed += bad.size();
                return res;
            }
            n_->retried += bad.size();
            if (int pause = kRetryPauseMs[attempt])
                std::this_thread::sleep_for(std::chrono::milliseconds(pause));
            idx = std::move(bad);
        }
    }

    // The value's size if trailer `t` verifies, else kBad: `crc` is the CRC32C
    // of the key then the value (version 2), `value_crc()` that of the value
    // alone, asked only of a version-1 trailer.
    template <class ValueCrc>
    int64_t verdict(const Trailer &t, uint32_t crc, ValueCrc value_crc, int64_t value_size) {
        const bool ok = t.magic == kTrailerMagic     ? t.crc == crc
                        : t.magic == kTrailerMagicV1 ? t.crc == value_crc()
                                                     : false;
        if (!ok) return kBad;
        n_->verified++;
        return value_size;
    }
    // verdict() for the `n` bytes at `p`, stored under `key`.
    int64_t verdict(const Trailer &t, const std::string &key, const void *p, int64_t n) {
        return verdict(
            t, crc32c(key_seed(key), p, size_t(n)), [&] { return crc32c(0, p, size_t(n)); }, n);
    }

    // Multi-part reads: the caller's parts plus a trailer part; Mooncake
    // reads only when they add up to the value (the engine handles the rest).
    std::vector<int64_t> read_parts(const StrVec &keys, const std::vector<void *> &bufs,
                                    const std::vector<size_t> &sizes,
                                    const std::vector<size_t> &first) {
        const size_t n = keys.size();
        std::vector<Trailer> tr(n);
        std::vector<void *> b2;
        std::vector<size_t> s2, f2{0};
        for (size_t i = 0; i < n; i++) {
            b2.insert(b2.end(), bufs.begin() + long(first[i]), bufs.begin() + long(first[i + 1]));
            s2.insert(s2.end(), sizes.begin() + long(first[i]), sizes.begin() + long(first[i + 1]));
            b2.push_back(&tr[i]);
            s2.push_back(kTrailerSize);
            f2.push_back(b2.size());
        }
        std::vector<int64_t> r = inner_->get_into_parts(keys, b2, s2, f2);
        if (r.size() != n) return r;
        auto read = [&](size_t i) { return r[i] < int64_t(kTrailerSize) ? 0 : uint64_t(r[i]); };
        for_each_on_two_threads(n, read, [&](size_t i) {
            if (r[i] < int64_t(kTrailerSize)) return;  // an error (or not ours: -800)
            r[i] = verdict(
                tr[i], parts_crc(key_seed(keys[i]), bufs, sizes, first, i),
                [&] { return parts_crc(0, bufs, sizes, first, i); }, r[i] - int64_t(kTrailerSize));
        });
        return r;
    }

    // One buffer of capacity caps[i] per key, filled with the value (not its
    // trailer) wherever the value's size falls.  Two ways, one round trip
    // each when it fits: "exact", [buffer][trailer], for a buffer sized to
    // the value; "whole", the value and its trailer into the buffer (the
    // bytes past the value's end are scratch), for a value shorter than it.
    // Which is tried first follows what the last read with that capacity
    // turned out to be (a caller's scratch buffer is never exact, a sized one
    // always is); the other is tried if the first does not fit, and a value
    // that fits neither way (cap < size < cap + 16) is sized and read as
    // [its size][trailer].
    std::vector<int64_t> read_whole(const StrVec &keys, const std::vector<void *> &bufs,
                                    const std::vector<size_t> &caps) {
        const size_t n = keys.size();
        std::vector<int64_t> r(n, MCS_E_INTERNAL);
        std::vector<size_t> exact, whole, sized;
        for (size_t i = 0; i < n; i++) (hint(caps[i]) < 0 ? whole : exact).push_back(i);
        auto try_exact = [&](const std::vector<size_t> &idx, std::vector<size_t> &shorter) {
            if (idx.empty()) return true;
            std::vector<size_t> first(idx.size() + 1);
            for (size_t j = 0; j <= idx.size(); j++) first[j] = j;
            std::vector<int64_t> e =
                read_parts(pick(keys, idx), pick(bufs, idx), pick(caps, idx), first);
            if (e.size() != idx.size()) return false;
            for (size_t j = 0; j < idx.size(); j++) {
                const size_t i = idx[j];
                if (e[j] == -800) {
                    shorter.push_back(i);  // the value is shorter than the buffer
                } else {
                    r[i] = e[j];
                    if (e[j] >= 0 || e[j] == kBad) note(caps[i], +1);
                }
            }
            return true;
        };
        auto try_whole = [&](const std::vector<size_t> &idx, std::vector<size_t> &longer) {
            if (idx.empty()) return true;
            std::vector<int64_t> w =
                inner_->get_into(pick(keys, idx), pick(bufs, idx), pick(caps, idx));
            if (w.size() != idx.size()) return false;
            for (size_t j = 0; j < idx.size(); j++) {
                const size_t i = idx[j];
                const int64_t got = w[j];
                if (got == -600) {  // value and trailer are longer than the buffer
                    longer.push_back(i);
                } else if (got < 0) {
                    r[i] = got;
                } else if (got < int64_t(kTrailerSize)) {
                    r[i] = kBad;
                } else {
                    const int64_t v = got - int64_t(kTrailerSize);
                    auto *p = static_cast<unsigned char *>(bufs[i]);
                    Trailer t;
                    std::memcpy(&t, p + v, kTrailerSize);
                    r[i] = verdict(t, keys[i], p, v);
                    note(caps[i], -1);
                }
            }
            return true;
        };
        std::vector<size_t> shorter, longer, longer2, shorter2;
        bool ok = try_exact(exact, shorter) && try_whole(whole, longer);
        // The second way for what the first did not fit.
        ok = ok && try_whole(shorter, longer2) && try_exact(longer, shorter2);
        if (!ok) return std::vector<int64_t>{};  // the engine reports the count
        sized = longer2;                         // after exact said shorter and whole said longer
        sized.insert(sized.end(), shorter2.begin(), shorter2.end());
        for (size_t i : sized) {
            int64_t s = size(keys[i]);
            if (s < 0 || uint64_t(s) > caps[i]) {
                r[i] = s < 0 ? s : -600;
                continue;
            }
            std::vector<size_t> one{0, 1};
            r[i] = read_parts({keys[i]}, {bufs[i]}, {size_t(s)}, one).at(0);
        }
        return r;
    }

    // Per capacity (hashed), which way of read_whole fitted last: > 0 exact,
    // < 0 whole, 0 not known yet (exact first).
    int hint(size_t cap) const { return hints_[slot(cap)].load(std::memory_order_relaxed); }
    void note(size_t cap, int way) {
        auto &h = hints_[slot(cap)];
        if (h.load(std::memory_order_relaxed) != way)
            h.store(int8_t(way), std::memory_order_relaxed);
    }
    static size_t slot(size_t cap) { return size_t((uint64_t(cap) * 0x9E3779B97F4A7C15ull) >> 58); }

    // Checks the held values in place (sizes become the values' own); the
    // positions of those that did not verify.
    std::vector<size_t> check_held(const StrVec &keys, HeldValues &hv) {
        const size_t n = hv.sizes.size();
        std::vector<char> failed(n, 0);
        auto held = [&](size_t i) { return hv.sizes[i] < 0 ? 0 : uint64_t(hv.sizes[i]); };
        for_each_on_two_threads(n, held, [&](size_t i) {
            const int64_t s = hv.sizes[i];
            if (s < 0) return;  // unread or an error
            if (s < int64_t(kTrailerSize) || !hv.values[i]) {
                failed[i] = 1;
                return;
            }
            const int64_t v = s - int64_t(kTrailerSize);
            const auto *p = static_cast<const unsigned char *>(hv.values[i]);
            Trailer t;
            std::memcpy(&t, p + v, kTrailerSize);
            if (verdict(t, keys[i], p, v) == kBad)
                failed[i] = 1;
            else
                hv.sizes[i] = v;
        });
        std::vector<size_t> bad;
        for (size_t i = 0; i < n; i++)
            if (failed[i]) bad.push_back(i);
        return bad;
    }

    std::unique_ptr<Backend> inner_;
    std::shared_ptr<IntegrityCounters> n_;
    const uint64_t base_;
    std::atomic<uint64_t> seq_{0};
    std::atomic<int8_t> hints_[64] = {};
    std::mutex scratch_mu_;
    std::unique_ptr<Trailer[]> scratch_;  // registered with the store once, for ever
};

}  // namespace

std::unique_ptr<Backend> make_integrity_backend(std::unique_ptr<Backend> inner,
                                                std::shared_ptr<IntegrityCounters> counters) {
    return std::make_unique<IntegrityBackend>(std::move(inner), std::move(counters));
}

}  // namespace mcs
