module cmbnode

go 1.26.6
