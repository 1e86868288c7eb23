package notices

import "hash/maphash"

// localRecs is the local store's records: records.snap's as read (base,
// immutable, in revision order) and a map of every record written since
// (over). A key is in one of them at most: a write or a deletion of a
// base record marks it dead (and puts the new value in over).
//
// base's records are found by an open-addressing table of their keys'
// hashes (a hash's high half and an index, 8 bytes a slot, no pointer):
// for 500,000 records a table of 8 MB the collector does not trace,
// built in one pass, where a map of them is some 60 MB of slots with
// pointers, built by as many random writes (BenchmarkNoticesOpen).
type localRecs struct {
	over  map[string]localEntry
	base  []loadItem
	dead  []bool   // base[i] was written or deleted since, or named again later in base
	table []uint64 // hash>>32<<32 | index+1 of base's keys (their last line); 0: free
	seed  maphash.Seed
	live  int // base's records not dead
}

func newLocalRecs(hint int) localRecs { return localRecs{over: make(map[string]localEntry, hint)} }

// setBase makes recs (in revision order: of a key named twice, the later
// line is the newer) the base; over must be empty.
func (r *localRecs) setBase(recs []loadItem) {
	if int64(len(recs)) >= 1<<31 { // an index must fit the table's low half (int64: 1<<31 overflows a 32-bit int)
		for _, x := range recs {
			r.over[x.key] = localEntry{Value: x.value, Rev: x.rev}
		}
		return
	}
	size := 16
	for size < 2*len(recs) {
		size <<= 1
	}
	r.seed = maphash.MakeSeed()
	r.base, r.dead, r.table, r.live = recs, make([]bool, len(recs)), make([]uint64, size), len(recs)
	mask := uint64(size - 1)
	for i := range recs {
		h := maphash.String(r.seed, recs[i].key)
		slot := h>>32<<32 | uint64(i+1)
		for j := h & mask; ; j = (j + 1) & mask {
			t := r.table[j]
			if t == 0 {
				r.table[j] = slot
				break
			}
			if t>>32 == h>>32 {
				if k := int(uint32(t)) - 1; recs[k].key == recs[i].key {
					r.dead[k] = true
					r.live--
					r.table[j] = slot
					break
				}
			}
		}
	}
}

// find returns the index in base of key's live record, or -1.
func (r *localRecs) find(key string) int {
	if len(r.table) == 0 {
		return -1
	}
	h := maphash.String(r.seed, key)
	mask := uint64(len(r.table) - 1)
	for j := h & mask; r.table[j] != 0; j = (j + 1) & mask {
		if t := r.table[j]; t>>32 == h>>32 {
			if i := int(uint32(t)) - 1; r.base[i].key == key {
				if r.dead[i] {
					return -1
				}
				return i
			}
		}
	}
	return -1
}

func (r *localRecs) get(key string) (localEntry, bool) {
	if e, ok := r.over[key]; ok {
		return e, true
	}
	if i := r.find(key); i >= 0 {
		return localEntry{Value: r.base[i].value, Rev: r.base[i].rev}, true
	}
	return localEntry{}, false
}

func (r *localRecs) set(key string, e localEntry) {
	if _, ok := r.over[key]; !ok {
		r.kill(key)
	}
	r.over[key] = e
}

func (r *localRecs) del(key string) {
	delete(r.over, key)
	r.kill(key)
}

// kill marks key's base record dead, if it has one.
func (r *localRecs) kill(key string) {
	if i := r.find(key); i >= 0 {
		r.dead[i] = true
		r.live--
	}
}

func (r *localRecs) len() int { return len(r.over) + r.live }

// each calls fn for every record, in no order.
func (r *localRecs) each(fn func(key string, e localEntry)) {
	for k, e := range r.over {
		fn(k, e)
	}
	for i := range r.base {
		if !r.dead[i] {
			fn(r.base[i].key, localEntry{Value: r.base[i].value, Rev: r.base[i].rev})
		}
	}
}

// compact moves base's live records to over once most of base is dead
// (its keys and values stay in memory until then).
func (r *localRecs) compact() {
	if r.base == nil || r.live > len(r.base)/2 {
		return
	}
	for i := range r.base {
		if !r.dead[i] {
			r.over[r.base[i].key] = localEntry{Value: r.base[i].value, Rev: r.base[i].rev}
		}
	}
	r.base, r.dead, r.table, r.live = nil, nil, nil, 0
}
