package driver

// IsolateSuspect returns the events a claim takes from the due events it
// locked, in claim order: the first suspect (an event with a lease expiry
// on record) alone when there is one, all of them otherwise. A relay that
// dies publishing a suspect then takes no other event down with it.
func IsolateSuspect(events []Event) []Event {
	for i := range events {
		if events[i].LeaseExpiries > 0 {
			return events[i : i+1]
		}
	}
	return events
}

// FitBudget returns how many of the leading events, whose stored sizes are
// sizes in claim order, a claim with a byte budget takes: the first one
// always, then the next ones while the running total stays within budget.
// A budget of zero or less takes them all.
func FitBudget(sizes []int64, budget int64) int {
	if budget <= 0 {
		return len(sizes)
	}
	var total int64
	for i, size := range sizes {
		total += size
		if i > 0 && total > budget {
			return i
		}
	}
	return len(sizes)
}
