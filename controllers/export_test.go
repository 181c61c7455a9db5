package controllers

// Names the controllers derive, for specs that put something in their way.
var (
	BuilderName = builderName
	VercelName  = vercelName
	OwnerTags   = ownerTags
)
