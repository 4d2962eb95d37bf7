package registryapi

// rowTable is a shard's rows by id: open addressing, linear probing, over
// slots that hold a row beside its id's hash. A read follows the shard
// to one slot and the row it names, whose parts hold the id it compares
// (the answer then begins on that line): a map would have it read its
// header, directory, table and group, and the key's bytes apart, each a
// line that is cold when reads come over the network between other work.
type rowTable struct {
	slots []rowSlot // a power of two long, or none
	n     int       // slots in use
}

// rowSlot is a row of a rowTable; a hash of 0 marks a free slot (rowHash
// never gives 0).
type rowSlot struct {
	hash uint64
	e    *cachedAgent
}

func (t *rowTable) get(h uint64, id string) *cachedAgent {
	if t.n == 0 {
		return nil
	}
	if i, ok := t.find(h, id); ok {
		return t.slots[i].e
	}
	return nil
}

// find is the slot of id (hash h), or false.
func (t *rowTable) find(h uint64, id string) (uint64, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch s := &t.slots[i]; {
		case s.hash == 0:
			return 0, false
		case s.hash == h && s.e.view.id == id:
			return i, true
		}
	}
}

// put keeps e (its id's hash h), replacing the row of that id; it returns
// the row replaced, or nil.
func (t *rowTable) put(h uint64, e *cachedAgent) *cachedAgent {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.hash == 0 {
			*s = rowSlot{h, e}
			t.n++
			return nil
		}
		if s.hash == h && s.e.view.id == e.view.id {
			old := s.e
			s.e = e
			return old
		}
	}
}

func (t *rowTable) grow() {
	old := t.slots
	t.slots, t.n = make([]rowSlot, max(8, 2*len(old))), 0
	for _, s := range old {
		if s.hash != 0 {
			t.put(s.hash, s.e)
		}
	}
}

// remove drops the row of id (hash h), and returns it, or nil.
func (t *rowTable) remove(h uint64, id string) *cachedAgent {
	if t.n == 0 {
		return nil
	}
	i, ok := t.find(h, id)
	if !ok {
		return nil
	}
	return t.removeAt(i)
}

// removeAt empties slot i and moves the rows probed past it back, so that
// no probe meets a free slot before its row.
func (t *rowTable) removeAt(i uint64) *cachedAgent {
	e := t.slots[i].e
	t.slots[i] = rowSlot{}
	t.n--
	mask := uint64(len(t.slots) - 1)
	for j := (i + 1) & mask; t.slots[j].hash != 0; j = (j + 1) & mask {
		// The row in j stays unless the hole lies between its home slot
		// and j, cyclically.
		if home := t.slots[j].hash & mask; (j-home)&mask >= (j-i)&mask {
			t.slots[i], t.slots[j] = t.slots[j], rowSlot{}
			i = j
		}
	}
	return e
}

// any is a row of the table, or nil.
func (t *rowTable) any() (uint64, bool) {
	if t.n > 0 {
		for i, s := range t.slots {
			if s.hash != 0 {
				return uint64(i), true
			}
		}
	}
	return 0, false
}
