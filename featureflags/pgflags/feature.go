package pgflags

// Feature is a flag as the operator API shows it, with GitLab's field names.
type Feature struct {
	Name  string `json:"name"`
	State string `json:"state"` // StateOn, StateOff or StateConditional
	Gates []Gate `json:"gates"`
}

// Gate is one of a flag's gates. Value is a bool (boolean), a []string (actors) or an int
// (percentage_of_actors).
type Gate struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// Feature states, as GitLab reports them.
const (
	StateOn          = "on"          // boolean gate on
	StateOff         = "off"         // no gate on
	StateConditional = "conditional" // actor or percentage gates only
)

// Gate keys, as GitLab names them.
const (
	GateBoolean            = "boolean"
	GateActors             = "actors"
	GatePercentageOfActors = "percentage_of_actors"
)

// flagRow is one flag as stored: the feature_flags row and its actors.
type flagRow struct {
	Name       string
	Enabled    *bool // nil: no boolean gate; false: disabled explicitly
	Percentage *int32
	Actors     []string // sorted
}

func (r flagRow) on() bool       { return r.Enabled != nil && *r.Enabled }
func (r flagRow) disabled() bool { return r.Enabled != nil && !*r.Enabled }

// percentage is the percentage_of_actors gate; 0 means unset, as in Flipper.
func (r flagRow) percentage() int {
	if r.Percentage == nil {
		return 0
	}
	return int(*r.Percentage)
}

// feature lists gates the way GitLab does: the boolean gate always, the others only when set.
func (r flagRow) feature() Feature {
	f := Feature{Name: r.Name, State: StateOff, Gates: []Gate{{Key: GateBoolean, Value: r.on()}}}
	if len(r.Actors) > 0 {
		f.Gates = append(f.Gates, Gate{Key: GateActors, Value: r.Actors})
		f.State = StateConditional
	}
	if pct := r.percentage(); pct > 0 {
		f.Gates = append(f.Gates, Gate{Key: GatePercentageOfActors, Value: pct})
		f.State = StateConditional
	}
	if r.on() {
		f.State = StateOn
	}
	return f
}
