package space

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// listParam is a list of min..max items, each a genome of the item group.
type listParam struct {
	min, max int
	item     *group
}

// listOp is one way of mutating a list.
type listOp int

const (
	opAdd listOp = iota
	opRemove
	opEdit
)

func (p *listParam) random(r *rand.Rand) any {
	items := make([]any, p.min+r.IntN(p.max-p.min+1))
	for i := range items {
		items[i] = p.item.random(r)
	}
	return items
}

// mutate adds a random item, removes one, or mutates one param of one item,
// picking uniformly among the operations the list's length allows.
func (p *listParam) mutate(v any, r *rand.Rand) any {
	items := v.([]any)
	ops := p.ops(len(items))
	switch ops[r.IntN(len(ops))] {
	case opAdd:
		return slices.Insert(slices.Clone(items), r.IntN(len(items)+1), any(p.item.random(r)))
	case opRemove:
		i := r.IntN(len(items))
		return slices.Delete(slices.Clone(items), i, i+1)
	}
	i := r.IntN(len(items))
	out := slices.Clone(items)
	out[i], _ = p.item.mutate(items[i].(map[string]any), r)
	return out
}

// ops lists the operations possible on a list of n items.
func (p *listParam) ops(n int) []listOp {
	ops := make([]listOp, 0, 3)
	if n < p.max {
		ops = append(ops, opAdd)
	}
	if n > p.min {
		ops = append(ops, opRemove)
	}
	if n > 0 && p.item.mutable() {
		ops = append(ops, opEdit)
	}
	return ops
}

func (p *listParam) validate(v any, path string) (any, error) {
	items, err := listItems(v, path)
	if err != nil {
		return nil, err
	}
	if len(items) < p.min {
		return nil, genomeErr(path, "%d items below min %d", len(items), p.min)
	}
	if len(items) > p.max {
		return nil, genomeErr(path, "%d items above max %d", len(items), p.max)
	}
	out := make([]any, len(items))
	for i, it := range items {
		if out[i], err = p.item.validate(it, ""); err != nil {
			return nil, within(err, fmt.Sprintf("%s[%d]", path, i))
		}
	}
	return out, nil
}

// listItems accepts the list shapes that decoders produce.
func listItems(v any, path string) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case []map[string]any:
		items := make([]any, len(x))
		for i, m := range x {
			items[i] = m
		}
		return items, nil
	}
	return nil, genomeErr(path, "want a list, got %T", v)
}

func (p *listParam) mutable() bool {
	return p.min < p.max || p.item.mutable()
}

func (p *listParam) describe() string {
	return fmt.Sprintf("list[%d..%d] of {%s}", p.min, p.max, p.item.describe())
}

func (p *listParam) size() int {
	return addSat(1, mulSat(p.max, p.item.size()))
}
