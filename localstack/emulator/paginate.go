package emulator

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// listQuery is a parsed list query: the parameters of
// docs/dev/vercel-sandbox-api.md §5.3, §5.7 and §5.10, checked as §9 item 17 says.
type listQuery struct {
	limit      int
	sortBy     string
	order      string // "asc" | "desc"
	cursor     *cursorData
	namePrefix string
	status     string
	hasTag     bool
	tagKey     string
	tagValue   string
}

// cursorData is the content of an opaque cursor: the sort it belongs to and
// the position (sort key + creation sequence) of the last item served.
type cursorData struct {
	SortBy string `json:"s"`
	Order  string `json:"o"`
	Num    int64  `json:"n,omitempty"`
	Str    string `json:"k,omitempty"`
	Seq    uint64 `json:"q"`
}

func encodeCursor(c cursorData) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (*cursorData, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, false
	}
	var c cursorData
	if err := json.Unmarshal(b, &c); err != nil || c.Seq == 0 {
		return nil, false
	}
	return &c, true
}

// parseListQuery validates limit, cursor, sortBy, sortOrder and — when
// filters is set (GET /v2/sandboxes) — namePrefix, status and tags.
// sortBys lists the allowed sortBy values; the first is the default.
func parseListQuery(v url.Values, sortBys []string, filters bool) (listQuery, *apiError) {
	q := listQuery{limit: 20, sortBy: sortBys[0], order: "desc"}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return q, invalid("limit", "should be integer")
		}
		if n < 1 {
			return q, invalid("limit", "should be >= 1")
		}
		if n > 50 {
			return q, invalid("limit", "should be <= 50")
		}
		q.limit = n
	}
	if s := v.Get("sortBy"); s != "" {
		if !slices.Contains(sortBys, s) {
			return q, invalid("sortBy", "should be equal to one of the allowed values: %s", strings.Join(sortBys, ", "))
		}
		q.sortBy = s
	}
	if s := v.Get("sortOrder"); s != "" {
		if s != "asc" && s != "desc" {
			return q, invalid("sortOrder", "should be equal to one of the allowed values: asc, desc")
		}
		q.order = s
	}
	if filters {
		if s := v.Get("namePrefix"); s != "" {
			if q.sortBy != "name" {
				return q, invalid("namePrefix", "is only valid with `sortBy=name`")
			}
			q.namePrefix = s
		}
		if s := v.Get("status"); s != "" {
			if s != "running" && s != "stopping" && s != "stopped" {
				return q, invalid("status", "should be equal to one of the allowed values: running, stopping, stopped")
			}
			if q.sortBy != "createdAt" {
				return q, invalid("status", "is only valid with `sortBy=createdAt`")
			}
			q.status = s
		}
		if tags := v["tags"]; len(tags) > 0 {
			if len(tags) > 1 || strings.Contains(tags[0], ",") {
				return q, invalid("tags", "supports only one tag filter")
			}
			k, val, ok := strings.Cut(tags[0], ":")
			if !ok || k == "" {
				return q, invalid("tags", "should have the form key:value")
			}
			q.hasTag, q.tagKey, q.tagValue = true, k, val
		}
	}
	if s := v.Get("cursor"); s != "" {
		c, ok := decodeCursor(s)
		if !ok {
			return q, invalid("cursor", "is not a valid cursor")
		}
		if c.SortBy != q.sortBy || c.Order != q.order {
			return q, invalid("cursor", "belongs to a different sort (sortBy=%s, sortOrder=%s)", c.SortBy, c.Order)
		}
		q.cursor = c
	}
	return q, nil
}

// pageItem is one listable item: its sort key (num or str), its creation
// sequence (the tie-breaker) and its index in the caller's slice.
type pageItem struct {
	num int64
	str string
	seq uint64
	idx int
}

func comparePage(a, b pageItem) int {
	if c := cmp.Compare(a.num, b.num); c != 0 {
		return c
	}
	if c := cmp.Compare(a.str, b.str); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// paginate sorts items, skips those up to the cursor and returns the indexes
// of one page plus the pagination block.
func paginate(items []pageItem, q listQuery) ([]int, vercel.Pagination) {
	slices.SortFunc(items, func(a, b pageItem) int {
		if q.order == "asc" {
			return comparePage(a, b)
		}
		return comparePage(b, a)
	})
	start := 0
	if c := q.cursor; c != nil {
		pos := pageItem{num: c.Num, str: c.Str, seq: c.Seq}
		start = len(items)
		for i, it := range items {
			r := comparePage(it, pos)
			if (q.order == "asc" && r > 0) || (q.order == "desc" && r < 0) {
				start = i
				break
			}
		}
	}
	end := min(start+q.limit, len(items))
	page := make([]int, 0, end-start)
	for _, it := range items[start:end] {
		page = append(page, it.idx)
	}
	pg := vercel.Pagination{Count: int64(len(page))}
	if end < len(items) {
		last := items[end-1]
		next := encodeCursor(cursorData{SortBy: q.sortBy, Order: q.order, Num: last.num, Str: last.str, Seq: last.seq})
		pg.Next = &next
	}
	return page, pg
}
