package builds

import (
	"errors"
	"fmt"
)

// Failures of the store of record that are not answers to the caller's question: the
// adapter translates its database's error codes into these (and ErrUnavailable), so that
// what reaches a handler is a domain error, never a driver's code.
var (
	// ErrNULCharacter: text or JSON held a NUL character ("\u0000"), which the store cannot
	// keep; nothing was written. The client's input, not a failure of the store.
	ErrNULCharacter = errors.New("text contains a NUL character")
	// ErrContention: the store aborted a write against concurrent ones (a deadlock or a
	// serialization failure) and its retries did not get through.
	ErrContention = errors.New("write aborted by concurrent writes")
)

// ConstraintError: the store refused a write that breaks a constraint of its schema and
// that no more specific answer (ErrExists, ErrNotFound, ErrRunnerForbidden...) explains,
// which makes it a bug or a race the caller did not plan for.
type ConstraintError struct {
	Kind ConstraintKind
	// Name is the constraint's name in the schema, when the store reports it.
	Name string
}

func (e *ConstraintError) Error() string {
	if e.Name == "" {
		return e.Kind.String() + " violated"
	}
	return fmt.Sprintf("%s %s violated", e.Kind, e.Name)
}

// ConstraintKind is which kind of constraint a write broke.
type ConstraintKind int

const (
	// Unique: a unique index or primary key (a duplicate).
	Unique ConstraintKind = iota + 1
	// ForeignKey: a reference to a row that does not exist, or a delete of a referenced one.
	ForeignKey
	// Check: a CHECK constraint.
	Check
	// NotNull: a NULL in a NOT NULL column.
	NotNull
	// Exclusion: an exclusion constraint.
	Exclusion
	// OtherConstraint: an integrity rule of another kind.
	OtherConstraint
)

func (k ConstraintKind) String() string {
	switch k {
	case Unique:
		return "unique constraint"
	case ForeignKey:
		return "foreign key"
	case Check:
		return "check constraint"
	case NotNull:
		return "not-null constraint"
	case Exclusion:
		return "exclusion constraint"
	case OtherConstraint:
		return "integrity constraint"
	}
	return fmt.Sprintf("ConstraintKind(%d)", int(k))
}
